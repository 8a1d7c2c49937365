// `raio llm ...`: the LLM commands (the raio CLI runs this binary, raio-llm, for them).
//
//   raio llm serve --model DIR [--host H] [--port P] [--max-num-seqs N]
//                  [--max-num-batched-tokens N] [--kv-cache-bytes B] [--max-queued N]
//                  [--device cpu|cuda:0] [--threads N]
//   raio llm convert --model DIR --out DIR --to hf|llama2c
//   raio llm generate --model DIR [--prompt TEXT] [--max-tokens N] [--temperature T]
//
// `serve` prints "raio llm serve: listening on HOST:PORT" once bound (with --port 0 the
// port chosen) and serves until SIGINT or SIGTERM. Usage errors exit 2.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "raio/llm/engine.h"
#include "raio/llm/model.h"
#include "raio/llm/model_dir.h"
#include "raio/llm/openai_server.h"

namespace {

int Fail(const absl::Status& s) {
  std::cerr << "raio llm: " << s << "\n";
  return 1;
}

int Serve(const std::string& model_dir, const raio::llm::EngineConfig& config,
          const raio::llm::ServerOptions& server_options, int threads) {
  // Block the signals before any thread starts, then wait for one on this thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
  raio::llm::SetTorchThreads(threads);
  absl::StatusOr<raio::llm::LoadedModel> model = raio::llm::LoadModelDir(model_dir);
  if (!model.ok()) return Fail(model.status());
  auto engine = raio::llm::Engine::Create(*std::move(model), config);
  if (!engine.ok()) return Fail(engine.status());
  (*engine)->Start();
  raio::llm::OpenAiServer server(engine->get(), server_options);
  absl::StatusOr<int> port = server.Start();
  if (!port.ok()) return Fail(port.status());
  std::printf("raio llm serve: model %s (%d KV blocks of %d tokens) listening on %s:%d\n",
              (*engine)->model_name().c_str(), (*engine)->Stats().num_blocks, config.block_size,
              server_options.host.c_str(), *port);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&set, &sig);
  server.Stop();
  (*engine)->Stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"raio llm: LLM serving (continuous batching, OpenAI-compatible API)"};
  app.require_subcommand(1);
  std::string model_dir;
  raio::llm::EngineConfig config;
  raio::llm::ServerOptions server_options;
  int threads = 1;
  auto* serve = app.add_subcommand("serve", "serve a model over the OpenAI HTTP API");
  serve->add_option("--model", model_dir, "model directory (Hugging Face or llama2.c layout)")
      ->required();
  serve->add_option("--host", server_options.host, "address to listen on");
  serve->add_option("--port", server_options.port, "port (0: any free one)");
  serve->add_option("--max-num-seqs", config.max_num_seqs, "running requests at most");
  serve->add_option("--max-num-batched-tokens", config.max_num_batched_tokens,
                    "token budget per step");
  serve->add_option("--kv-cache-bytes", config.kv_cache_bytes, "KV cache pool size in bytes");
  serve->add_option("--max-queued", config.max_queued_requests,
                    "queued requests beyond max-num-seqs before 503");
  serve->add_option("--device", config.device, "torch device");
  serve->add_option("--threads", threads, "libtorch intra-op threads");

  std::string out_dir, to;
  auto* convert = app.add_subcommand("convert", "convert a model directory between layouts");
  convert->add_option("--model", model_dir, "source model directory")->required();
  convert->add_option("--out", out_dir, "destination directory")->required();
  convert->add_option("--to", to, "hf or llama2c")->required()->check(CLI::IsMember({"hf", "llama2c"}));

  std::string prompt;
  raio::llm::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = 64;
  auto* generate = app.add_subcommand("generate", "generate text in-process (no server)");
  generate->add_option("--model", model_dir, "model directory")->required();
  generate->add_option("--prompt", prompt, "prompt text (empty: from BOS)");
  generate->add_option("--max-tokens", params.max_tokens, "tokens to generate");
  generate->add_option("--temperature", params.temperature, "0: greedy");
  CLI11_PARSE(app, argc, argv);

  if (*serve) return Serve(model_dir, config, server_options, threads);
  if (*convert) {
    absl::Status s = raio::llm::ConvertModelDir(
        model_dir, out_dir,
        to == "hf" ? raio::llm::ModelLayout::kHuggingFace : raio::llm::ModelLayout::kLlama2c);
    if (!s.ok()) return Fail(s);
    std::printf("raio llm convert: wrote %s\n", out_dir.c_str());
    return 0;
  }
  raio::llm::SetTorchThreads(1);
  absl::StatusOr<raio::llm::LoadedModel> model = raio::llm::LoadModelDir(model_dir);
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
