// The byte buffers of rpc::Connection:
//  - RawTail: bytes that end a frame and stay in the caller's memory; the connection
//    writes them from there (scatter-gather) and drops the caller's keep-alive once done.
//  - internal::ByteBuffer: a growable byte array that never zero-fills (every byte is
//    written before it is read: frames are serialized into it, or the socket reads into it).
//  - internal::WriteQueue: the frames waiting to be written, as the connection's own bytes
//    with borrowed tails between them, handed to the stream as one buffer sequence.
//
// Thread-safety: none; the connection guards its queue with its mutex.
#pragma once

#include <algorithm>
#include <boost/asio/buffer.hpp>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

namespace raio::rpc {

// The last bytes of a frame's body, written straight from `data` instead of being copied
// into the connection's buffer. `keep_alive` holds whatever keeps `data` valid (a pin of
// an object in the store, the buffer itself); the connection drops it once every byte has
// gone to the stream, or the connection has closed, on the connection's loop thread (the
// one exception: a connection destroyed with the tail still queued drops it wherever it is
// destroyed). An empty tail's keep-alive is dropped at once.
struct RawTail {
  std::string_view data;
  std::shared_ptr<const void> keep_alive;
};

namespace internal {

class ByteBuffer {
 public:
  ByteBuffer() = default;
  ByteBuffer(const ByteBuffer&) = delete;
  ByteBuffer& operator=(const ByteBuffer&) = delete;
  ByteBuffer(ByteBuffer&& other) noexcept { Swap(other); }
  ByteBuffer& operator=(ByteBuffer&& other) noexcept {
    Swap(other);
    return *this;
  }
  ~ByteBuffer() { std::free(data_); }

  char* data() { return data_; }
  const char* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::size_t capacity() const { return capacity_; }
  bool empty() const { return size_ == 0; }

  // Makes room for `capacity` bytes in all, keeping the contents; never shrinks.
  void Reserve(std::size_t capacity) {
    if (capacity <= capacity_) return;
    void* p = std::realloc(data_, capacity);
    if (p == nullptr) throw std::bad_alloc();
    data_ = static_cast<char*>(p);
    capacity_ = capacity;
  }
  // Appends `n` bytes left for the caller to write; returns where they start.
  char* Extend(std::size_t n) {
    if (size_ + n > capacity_) Reserve(std::max(size_ + n, capacity_ * 2));
    char* at = data_ + size_;
    size_ += n;
    return at;
  }
  // Drops the first `n` bytes.
  void Consume(std::size_t n) {
    if (n >= size_) {
      size_ = 0;
      return;
    }
    std::memmove(data_, data_ + n, size_ - n);
    size_ -= n;
  }
  void Clear() { size_ = 0; }
  // Frees the memory.
  void Release() {
    std::free(data_);
    data_ = nullptr;
    size_ = capacity_ = 0;
  }
  void Swap(ByteBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    std::swap(capacity_, other.capacity_);
  }

 private:
  char* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

// Bytes to write, in order: the queue's own bytes, with tails inserted between them (a
// tail at `at` goes after the first `at` own bytes).
class WriteQueue {
 public:
  bool empty() const { return bytes_.empty() && tails_.empty(); }
  bool has_tails() const { return !tails_.empty(); }
  // The first own bytes; all of them when there are no tails.
  std::string_view bytes() const { return {bytes_.data(), bytes_.size()}; }

  // Appends `n` own bytes for the caller to write.
  char* Extend(std::size_t n) { return bytes_.Extend(n); }
  void AppendTail(RawTail tail) {
    if (tail.data.empty()) return;
    tails_.push_back({bytes_.size(), std::move(tail)});
  }

  // The queue as a buffer sequence (valid until the queue changes).
  void Buffers(std::vector<boost::asio::const_buffer>* out) const {
    out->clear();
    std::size_t pos = 0;
    for (const Tail& t : tails_) {
      if (t.at > pos) out->emplace_back(bytes_.data() + pos, t.at - pos);
      out->emplace_back(t.tail.data.data(), t.tail.data.size());
      pos = t.at;
    }
    if (bytes_.size() > pos) out->emplace_back(bytes_.data() + pos, bytes_.size() - pos);
  }

  // Drops the first `n` bytes (they were written); the keep-alives of tails written whole
  // go to `released`, for the caller to drop outside its lock.
  void Consume(std::size_t n, std::vector<std::shared_ptr<const void>>* released) {
    std::size_t pos = 0;  // own bytes consumed
    while (n > 0) {
      if (!tails_.empty() && tails_.front().at == pos) {
        RawTail& t = tails_.front().tail;
        const std::size_t k = std::min(n, t.data.size());
        t.data.remove_prefix(k);
        n -= k;
        if (!t.data.empty()) break;
        released->push_back(std::move(t.keep_alive));
        tails_.pop_front();
        continue;
      }
      const std::size_t end = tails_.empty() ? bytes_.size() : tails_.front().at;
      const std::size_t k = std::min(n, end - pos);
      pos += k;
      n -= k;
      if (k == 0) break;  // more than the queue holds: nothing left
    }
    bytes_.Consume(pos);
    for (Tail& t : tails_) t.at -= pos;
  }

  // Empties the queue, keeping its memory; the tails' keep-alives go to `released`.
  void Clear(std::vector<std::shared_ptr<const void>>* released) {
    bytes_.Clear();
    for (Tail& t : tails_) released->push_back(std::move(t.tail.keep_alive));
    tails_.clear();
  }
  void Swap(WriteQueue& other) noexcept {
    bytes_.Swap(other.bytes_);
    tails_.swap(other.tails_);
  }

 private:
  struct Tail {
    std::size_t at;
    RawTail tail;
  };
  ByteBuffer bytes_;
  std::deque<Tail> tails_;
};

}  // namespace internal
}  // namespace raio::rpc
