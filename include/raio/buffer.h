// Zero-copy views of objects.
//
//   auto ref = raio::Put(std::vector<float>(1 << 28));       // 1 GiB, one copy into the store
//   raio::ArrayView<float> view = ref.GetView();             // maps it: nothing copied
//   raio::Buffer bytes = raio::Put(raio::Buffer::Copy(p, n)).Get();
//
// A view of an object in the node's shared-memory store points into the store and keeps
// the object pinned (neither spilled nor freed) until the last copy of the view is
// destroyed. A view of a small (inline) object points at the owner's in-process copy.
// Thread-safety: views are immutable values; copies may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace raio {

// Raw bytes. As a value type, a Buffer is stored as its bytes (no msgpack framing).
class Buffer {
 public:
  Buffer() = default;
  // An owning buffer holding a copy of `size` bytes at `data`.
  static Buffer Copy(const void* data, std::size_t size) {
    auto owned = std::make_shared<std::string>(static_cast<const char*>(data), size);
    return Buffer(owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size());
  }
  // An owning buffer taking `bytes`.
  static Buffer FromString(std::string bytes) {
    auto owned = std::make_shared<std::string>(std::move(bytes));
    return Buffer(owned, reinterpret_cast<const uint8_t*>(owned->data()), owned->size());
  }
  // A view of `size` bytes at `data`, valid while `keeper` lives (runtime use).
  Buffer(std::shared_ptr<const void> keeper, const uint8_t* data, std::size_t size)
      : keeper_(std::move(keeper)), data_(data), size_(size) {}

  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  std::shared_ptr<const void> keeper_;
  const uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// A read-only array of `size()` elements of trivially copyable T.
template <typename T>
class ArrayView {
 public:
  ArrayView() = default;
  ArrayView(std::shared_ptr<const void> keeper, const T* data, std::size_t size)
      : keeper_(std::move(keeper)), data_(data), size_(size) {}
  // An owning view over a vector (used when the object could not be mapped in place).
  explicit ArrayView(std::vector<T> values) {
    auto owned = std::make_shared<std::vector<T>>(std::move(values));
    data_ = owned->data();
    size_ = owned->size();
    keeper_ = owned;
  }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T& operator[](std::size_t i) const { return data_[i]; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }

 private:
  std::shared_ptr<const void> keeper_;
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace raio
