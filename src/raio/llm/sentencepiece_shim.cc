// A C shim over Debian's libsentencepiece, built as its own module and loaded with
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND) by sentencepiece_model.cc. libsentencepiece.so
// carries and exports its own copy of protobuf-lite; linked into a process that also
// has libprotobuf.so (raio's wire code, libtorch), its symbols interpose libprotobuf's
// and the process crashes at start. Loaded locally and deep-bound, each copy keeps to
// itself.
#include <sentencepiece_processor.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {

__attribute__((visibility("default"))) void* raio_sp_load(const char* path, char* err,
                                                          int err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    std::snprintf(err, err_len, "%s", status.ToString().c_str());
    delete sp;
    return nullptr;
  }
  return sp;
}

__attribute__((visibility("default"))) void raio_sp_free(void* sp) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(sp);
}

// Writes up to `cap` ids to `out`; returns how many there are (call again if more).
__attribute__((visibility("default"))) int raio_sp_encode(void* sp, const char* text, size_t len,
                                                          int* out, int cap) {
  std::vector<int> ids;
  (void)static_cast<sentencepiece::SentencePieceProcessor*>(sp)->Encode(std::string(text, len),
                                                                        &ids);
  for (int i = 0; i < static_cast<int>(ids.size()) && i < cap; ++i) out[i] = ids[i];
  return static_cast<int>(ids.size());
}

__attribute__((visibility("default"))) int raio_sp_size(void* sp) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(sp)->GetPieceSize();
}

// Copies piece `id` into `buf` (up to cap bytes), sets flags (1: control or unknown,
// 2: byte token) and returns the piece's length.
__attribute__((visibility("default"))) int raio_sp_piece(void* sp, int id, char* buf, int cap,
                                                         int* flags) {
  auto* p = static_cast<sentencepiece::SentencePieceProcessor*>(sp);
  const std::string& piece = p->IdToPiece(id);
  std::memcpy(buf, piece.data(), std::min<size_t>(piece.size(), cap));
  *flags = ((p->IsControl(id) || p->IsUnknown(id)) ? 1 : 0) | (p->IsByte(id) ? 2 : 0);
  return static_cast<int>(piece.size());
}

}  // extern "C"
