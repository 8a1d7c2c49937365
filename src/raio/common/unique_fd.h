// UniqueFd: sole ownership of a file descriptor, closed when the owner goes.
// Thread-safety: like a std::unique_ptr (one owner; moving is not thread-safe).
#pragma once

#include <unistd.h>

#include <utility>

namespace raio {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd` (-1: none).
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  // Gives up ownership without closing.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  // Closes the current descriptor (if any) and owns `fd` instead.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace raio
