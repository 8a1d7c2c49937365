#include "raio/llm/model_dir.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "raio/llm/lora_adapter.h"

namespace raio::llm {
namespace fs = std::filesystem;
namespace {

struct Llama2cFiles {
  std::string checkpoint, tokenizer;
};

absl::StatusOr<Llama2cFiles> FindLlama2cFiles(const std::string& dir) {
  std::vector<fs::path> bins, models;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    if (e.path().extension() == ".bin") bins.push_back(e.path());
    if (e.path().extension() == ".model") models.push_back(e.path());
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read model directory ", dir));
  if (bins.empty()) {
    return absl::NotFoundError(absl::StrCat(dir, " holds neither config.json (Hugging Face) ",
                                            "nor a llama2.c checkpoint (*.bin)"));
  }
  std::sort(bins.begin(), bins.end(), [](const fs::path& a, const fs::path& b) {
    return fs::file_size(a) > fs::file_size(b);
  });
  std::sort(models.begin(), models.end());
  Llama2cFiles f{bins[0].string(), ""};
  if (!models.empty()) {
    f.tokenizer = models[0].string();
  } else if (bins.size() > 1) {
    f.tokenizer = bins[1].string();
  } else {
    return absl::NotFoundError(absl::StrCat(dir, ": no tokenizer (*.model or a second *.bin)"));
  }
  return f;
}

std::string BaseName(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  return p.filename().string();
}

}  // namespace

absl::StatusOr<LoadedModel> LoadModelDir(const std::string& dir, const std::string& lora_dir) {
  LoadedModel m;
  m.name = BaseName(dir);
  if (fs::exists(fs::path(dir) / "config.json")) {
    m.layout = ModelLayout::kHuggingFace;
    absl::StatusOr<ModelWeights> w = LoadHfModel(dir);
    if (!w.ok()) return w.status();
    m.weights = *std::move(w);
    absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        LoadSentencePieceTokenizer(dir + "/tokenizer.model");
    if (!t.ok()) return t.status();
    m.tokenizer = *std::move(t);
  } else {
    m.layout = ModelLayout::kLlama2c;
    absl::StatusOr<Llama2cFiles> files = FindLlama2cFiles(dir);
    if (!files.ok()) return files.status();
    absl::StatusOr<ModelWeights> w = LoadLlama2cCheckpoint(files->checkpoint);
    if (!w.ok()) return w.status();
    m.weights = *std::move(w);
    absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizer(files->tokenizer);
    if (!t.ok()) return t.status();
    m.tokenizer = *std::move(t);
  }
  if (m.tokenizer->vocab_size() != m.weights.config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(dir, ": tokenizer has ",
                                                   m.tokenizer->vocab_size(), " tokens, the model ",
                                                   m.weights.config.vocab_size));
  }
  if (!lora_dir.empty()) {
    absl::StatusOr<LoraAdapter> adapter = LoadLoraAdapter(lora_dir);
    if (!adapter.ok()) return adapter.status();
    if (absl::Status s = MergeLoraAdapter(*adapter, &m.weights); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(lora_dir, ": ", s.message()));
    }
  }
  return m;
}

absl::Status ConvertModelDir(const std::string& src_dir, const std::string& dst_dir,
                             ModelLayout layout) {
  absl::StatusOr<LoadedModel> m = LoadModelDir(src_dir);
  if (!m.ok()) return m.status();
  std::error_code ec;
  fs::create_directories(dst_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dst_dir));
  // The SentencePiece model, which both layouts can use.
  std::string sp_model;
  if (m->layout == ModelLayout::kHuggingFace) {
    sp_model = src_dir + "/tokenizer.model";
  } else {
    absl::StatusOr<Llama2cFiles> files = FindLlama2cFiles(src_dir);
    if (!files.ok()) return files.status();
    sp_model = files->tokenizer;
  }
  if (layout == ModelLayout::kHuggingFace) {
    if (!sp_model.ends_with(".model")) {
      return absl::FailedPreconditionError(
          "the Hugging Face layout needs a SentencePiece tokenizer.model; the source has none");
    }
    if (absl::Status s = SaveHfModel(m->weights, dst_dir); !s.ok()) return s;
    fs::copy_file(sp_model, fs::path(dst_dir) / "tokenizer.model",
                  fs::copy_options::overwrite_existing, ec);
  } else {
    if (absl::Status s = SaveLlama2cCheckpoint(m->weights, dst_dir + "/model.bin"); !s.ok()) {
      return s;
    }
    fs::path tok = fs::path(sp_model).filename();
    if (tok == "model.bin") tok = "tokenizer.bin";
    fs::copy_file(sp_model, fs::path(dst_dir) / tok, fs::copy_options::overwrite_existing, ec);
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot copy the tokenizer: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace raio::llm
