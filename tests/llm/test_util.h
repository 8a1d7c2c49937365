// Helpers shared by the llm tests: the bundled model's paths and a scoped temp dir.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace raio::llm::testing {

inline std::string ModelDir() { return RAIO_LLM_MODEL_DIR; }

// The text the stories260K README documents for greedy decoding from BOS.
inline const char* kKnownGreedyText =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
    "park. One day, she saw a big, red ball. She wanted to play with it, but it was too high";

// A fresh directory under $TMPDIR, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/raio-llm-test-XXXXXX";
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace raio::llm::testing
