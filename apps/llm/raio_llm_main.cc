// `raio llm ...`: the LLM commands (the raio CLI runs this binary, raio-llm, for them).
//
//   raio llm serve --model DIR [--lora DIR] [--host H] [--port P] [--max-num-seqs N]
//                  [--max-num-batched-tokens N] [--kv-cache-bytes B] [--max-queued N]
//                  [--device cpu|cuda:0] [--threads N] [--in-process]
//                  [--address HOST:PORT|auto] [--actor-resources JSON]
//                  [--engine-max-restarts N] [--keep-alive-timeout-s S]
//   raio llm convert --model DIR --out DIR --to hf|llama2c
//   raio llm generate --model DIR [--lora DIR] [--prompt TEXT] [--max-tokens N] [--temperature T]
//
// `serve` prints "raio llm serve: listening on HOST:PORT" once bound (with --port 0 the
// port chosen) and serves until SIGINT or SIGTERM. The engine runs in a raio actor
// (asking for 1 CPU) on the cluster at --address / RAIO_ADDRESS, else on an embedded
// one-node cluster, and is restarted when its process dies (--engine-max-restarts; -1:
// always); --in-process runs it in this process instead. --lora merges a PEFT LoRA adapter
// directory (adapter_config.json, adapter_model.safetensors) into the weights at load.
// Usage errors exit 2.
#include <raio/raio.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "raio/llm/engine.h"
#include "raio/llm/engine_actor.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "raio/llm/openai_server.h"

namespace {

int g_signal_pipe[2] = {-1, -1};

int Fail(const absl::Status& s) {
  std::cerr << "raio llm: " << s << "\n";
  return 1;
}

int Serve(const std::string& model_dir, const std::string& lora_dir,
          const raio::llm::EngineConfig& config, const raio::llm::ServerOptions& server_options,
          int threads, bool in_process, const std::string& address,
          const std::map<std::string, double>& actor_resources, int engine_max_restarts) {
  // SIGINT / SIGTERM write to a pipe this thread waits on. (Handlers, not a blocked
  // mask: worker processes the cluster starts inherit a mask, not handlers.)
  if (pipe(g_signal_pipe) != 0) return Fail(absl::InternalError("pipe failed"));
  struct sigaction sa = {};
  sa.sa_handler = [](int) {
    char c = 1;
    (void)!write(g_signal_pipe[1], &c, 1);
  };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<raio::llm::Engine> local_engine;
  std::unique_ptr<raio::llm::EngineClient> client;
  int num_blocks = 0;
  if (in_process) {
    raio::llm::SetTorchThreads(threads);
    absl::StatusOr<raio::llm::LoadedModel> model = raio::llm::LoadModelDir(model_dir, lora_dir);
    if (!model.ok()) return Fail(model.status());
    auto engine = raio::llm::Engine::Create(*std::move(model), config);
    if (!engine.ok()) return Fail(engine.status());
    local_engine = *std::move(engine);
    local_engine->Start();
    num_blocks = local_engine->Stats().num_blocks;
    client = std::make_unique<raio::llm::LocalEngineClient>(local_engine.get());
  } else {
    raio::InitOptions init;
    init.address = address;
    raio::Init(init);
    auto actor = raio::llm::ActorEngineClient::Create({.model_dir = model_dir,
                                                       .lora_dir = lora_dir,
                                                       .engine = config,
                                                       .torch_threads = threads,
                                                       .resources = actor_resources,
                                                       .max_restarts = engine_max_restarts});
    if (!actor.ok()) {
      raio::Shutdown();
      return Fail(actor.status());
    }
    client = *std::move(actor);
  }
  raio::llm::OpenAiServer server(client.get(), server_options);
  absl::StatusOr<int> port = server.Start();
  if (!port.ok()) return Fail(port.status());
  std::printf("raio llm serve: model %s (engine %s%s) listening on %s:%d\n",
              client->model_name().c_str(), in_process ? "in-process" : "in a raio actor",
              in_process ? (", " + std::to_string(num_blocks) + " KV blocks").c_str() : "",
              server_options.host.c_str(), *port);
  std::fflush(stdout);
  char c;
  while (read(g_signal_pipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  server.Stop();
  client.reset();
  if (local_engine) local_engine->Stop();
  if (!in_process) raio::Shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // In a raio worker (the engine actor's process) this runs the worker and never returns.
  if (std::getenv("RAIO_WORKER_MODE") != nullptr) raio::Init(argc, argv);
  CLI::App app{"raio llm: LLM serving (continuous batching, OpenAI-compatible API)"};
  app.require_subcommand(1);
  std::string model_dir, lora_dir;
  raio::llm::EngineConfig config;
  raio::llm::ServerOptions server_options;
  int threads = 1;
  auto* serve = app.add_subcommand("serve", "serve a model over the OpenAI HTTP API");
  serve->add_option("--model", model_dir, "model directory (Hugging Face or llama2.c layout)")
      ->required();
  serve->add_option("--lora", lora_dir, "PEFT LoRA adapter directory, merged into the weights");
  serve->add_option("--host", server_options.host, "address to listen on");
  serve->add_option("--port", server_options.port, "port (0: any free one)");
  serve->add_option("--max-num-seqs", config.max_num_seqs, "running requests at most");
  serve->add_option("--max-num-batched-tokens", config.max_num_batched_tokens,
                    "token budget per step");
  serve->add_option("--kv-cache-bytes", config.kv_cache_bytes, "KV cache pool size in bytes");
  serve->add_option("--max-queued", config.max_queued_requests,
                    "queued requests beyond max-num-seqs before 503");
  double keep_alive_timeout_s = 5;
  serve->add_option("--keep-alive-timeout-s", keep_alive_timeout_s,
                    "close a kept-alive connection idle this long (seconds)");
  serve->add_option("--device", config.device, "torch device");
  serve->add_option("--threads", threads, "libtorch intra-op threads");
  bool in_process = false;
  std::string address;
  serve->add_flag("--in-process", in_process, "run the engine in this process, not in an actor");
  serve->add_option("--address", address, "raio cluster (HOST:PORT or auto) [embedded]");
  int engine_max_restarts = -1;
  serve->add_option("--engine-max-restarts", engine_max_restarts,
                    "times the engine actor is restarted after its process dies (-1: always)");
  std::string actor_resources_json = R"({"CPU": 1})";
  serve->add_option("--actor-resources", actor_resources_json,
                    "resources the engine actor holds, JSON, e.g. '{\"CPU\": 1, \"GPU\": 1}'");

  std::string out_dir, to;
  auto* convert = app.add_subcommand("convert", "convert a model directory between layouts");
  convert->add_option("--model", model_dir, "source model directory")->required();
  convert->add_option("--out", out_dir, "destination directory")->required();
  convert->add_option("--to", to, "hf or llama2c")
      ->required()
      ->check(CLI::IsMember({"hf", "llama2c"}));

  std::string prompt;
  raio::llm::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 64;
  auto* generate = app.add_subcommand("generate", "generate text in-process (no server)");
  generate->add_option("--model", model_dir, "model directory")->required();
  generate->add_option("--lora", lora_dir, "PEFT LoRA adapter directory, merged into the weights");
  generate->add_option("--prompt", prompt, "prompt text (empty: from BOS)");
  generate->add_option("--max-tokens", params.max_tokens, "tokens to generate");
  generate->add_option("--temperature", params.temperature, "0: greedy");
  CLI11_PARSE(app, argc, argv);

  if (*serve) {
    server_options.keep_alive_timeout = absl::Seconds(keep_alive_timeout_s);
    std::map<std::string, double> actor_resources;
    try {
      actor_resources =
          nlohmann::json::parse(actor_resources_json).get<std::map<std::string, double>>();
    } catch (const std::exception& e) {
      std::cerr << "raio llm: --actor-resources must be a JSON object of numbers: " << e.what()
                << "\n";
      return 2;
    }
    return Serve(model_dir, lora_dir, config, server_options, threads, in_process, address,
                 actor_resources, engine_max_restarts);
  }
  if (*convert) {
    absl::Status s = raio::llm::ConvertModelDir(
        model_dir, out_dir,
        to == "hf" ? raio::llm::ModelLayout::kHuggingFace : raio::llm::ModelLayout::kLlama2c);
    if (!s.ok()) return Fail(s);
    std::printf("raio llm convert: wrote %s\n", out_dir.c_str());
    return 0;
  }
  raio::llm::SetTorchThreads(1);
  absl::StatusOr<raio::llm::LoadedModel> model = raio::llm::LoadModelDir(model_dir, lora_dir);
  if (!model.ok()) return Fail(model.status());
  std::vector<int> ids = {model->tokenizer->bos_id()};
  std::vector<int> text = model->tokenizer->Encode(prompt);
  ids.insert(ids.end(), text.begin(), text.end());
  auto engine = raio::llm::Engine::Create(*std::move(model), config);
  if (!engine.ok()) return Fail(engine.status());
  absl::StatusOr<raio::llm::Completion> c = (*engine)->Generate(ids, params);
  if (!c.ok()) return Fail(c.status());
  std::printf("%s%s\n", prompt.c_str(), c->text.c_str());
  return 0;
}
