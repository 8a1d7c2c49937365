#include "raio/llm/sentencepiece_model.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>

namespace raio::llm::internal {
namespace {

// The shim's functions (sentencepiece_shim.cc), resolved once.
struct Shim {
  void* (*load)(const char*, char*, int) = nullptr;
  void (*free)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int*, int) = nullptr;
  int (*size)(void*) = nullptr;
  int (*piece)(void*, int, char*, int, int*) = nullptr;
  std::string error;
};

std::string ExeDir() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, n);
  return p.substr(0, p.rfind('/'));
}

const Shim& GetShim() {
  static const Shim shim = [] {
    Shim s;
    std::vector<std::string> candidates;
    if (const char* env = std::getenv("RAIO_SENTENCEPIECE_SHIM"); env && *env) {
      candidates.push_back(env);
    }
    candidates.push_back(ExeDir() + "/" RAIO_SENTENCEPIECE_SHIM_NAME);
    candidates.push_back(ExeDir() + "/../lib/" RAIO_SENTENCEPIECE_SHIM_NAME);
    candidates.push_back(RAIO_SENTENCEPIECE_SHIM_PATH);
    void* h = nullptr;
    for (const std::string& c : candidates) {
      h = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (h) break;
      const char* e = dlerror();
      s.error += c + ": " + (e ? e : "not loadable") + "; ";
    }
    if (!h) return s;
    s.load = reinterpret_cast<decltype(s.load)>(dlsym(h, "raio_sp_load"));
    s.free = reinterpret_cast<decltype(s.free)>(dlsym(h, "raio_sp_free"));
    s.encode = reinterpret_cast<decltype(s.encode)>(dlsym(h, "raio_sp_encode"));
    s.size = reinterpret_cast<decltype(s.size)>(dlsym(h, "raio_sp_size"));
    s.piece = reinterpret_cast<decltype(s.piece)>(dlsym(h, "raio_sp_piece"));
    if (!s.load || !s.free || !s.encode || !s.size || !s.piece) {
      s.load = nullptr;
      s.error = "the SentencePiece shim lacks a symbol";
    }
    return s;
  }();
  return shim;
}

}  // namespace

struct SentencePieceModel::Impl {
  void* sp = nullptr;
  ~Impl() {
    if (sp) GetShim().free(sp);
  }
};

SentencePieceModel::SentencePieceModel() : impl_(std::make_unique<Impl>()) {}
SentencePieceModel::~SentencePieceModel() = default;

std::unique_ptr<SentencePieceModel> SentencePieceModel::Load(const std::string& path,
                                                             std::string* error) {
  const Shim& shim = GetShim();
  if (!shim.load) {
    *error = "cannot load the SentencePiece shim: " + shim.error;
    return nullptr;
  }
  char err[512] = {0};
  void* sp = shim.load(path.c_str(), err, sizeof(err));
  if (!sp) {
    *error = err;
    return nullptr;
  }
  std::unique_ptr<SentencePieceModel> m(new SentencePieceModel());
  m->impl_->sp = sp;
  return m;
}

std::vector<int> SentencePieceModel::Encode(std::string_view text) const {
  std::vector<int> ids(text.size() + 8);
  int n = GetShim().encode(impl_->sp, text.data(), text.size(), ids.data(),
                           static_cast<int>(ids.size()));
  if (n > static_cast<int>(ids.size())) {
    ids.resize(n);
    n = GetShim().encode(impl_->sp, text.data(), text.size(), ids.data(), n);
  }
  ids.resize(n);
  return ids;
}

std::vector<SentencePieceToken> SentencePieceModel::Vocabulary() const {
  std::vector<SentencePieceToken> out;
  const int n = GetShim().size(impl_->sp);
  char buf[1024];
  for (int id = 0; id < n; ++id) {
    int flags = 0;
    int len = GetShim().piece(impl_->sp, id, buf, sizeof(buf), &flags);
    out.push_back(
        {std::string(buf, std::min<int>(len, sizeof(buf))), (flags & 1) != 0, (flags & 2) != 0});
  }
  return out;
}

}  // namespace raio::llm::internal
