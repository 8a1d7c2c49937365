#include "raio/node/worker_pool/worker_stderr.h"

#include <unistd.h>

#include <boost/asio/read.hpp>

#include "absl/strings/str_join.h"

namespace raio::node {

std::shared_ptr<WorkerStderr> WorkerStderr::Start(boost::asio::io_context& io, int read_fd) {
  std::shared_ptr<WorkerStderr> self(new WorkerStderr(io, read_fd));
  self->ReadMore();
  return self;
}

WorkerStderr::WorkerStderr(boost::asio::io_context& io, int read_fd) : pipe_(io, read_fd) {
  boost::system::error_code ignored;
  pipe_.non_blocking(true, ignored);
}

void WorkerStderr::ReadMore() {
  if (!pipe_.is_open()) return;
  pipe_.async_read_some(
      boost::asio::buffer(buf_),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
        if (n > 0) self->Consume(self->buf_.data(), n);
        if (ec) {
          self->Close();  // EOF: every writer is gone
          return;
        }
        self->ReadMore();
      });
}

void WorkerStderr::Drain() {
  while (pipe_.is_open()) {
    ssize_t n = ::read(pipe_.native_handle(), buf_.data(), buf_.size());
    if (n <= 0) break;  // EAGAIN (nothing more now), EOF or an error
    Consume(buf_.data(), static_cast<std::size_t>(n));
  }
}

void WorkerStderr::Consume(const char* data, std::size_t n) {
  // The node's stderr is the user's terminal (embedded) or the daemon's log.
  for (std::size_t done = 0; done < n;) {
    ssize_t w = ::write(STDERR_FILENO, data + done, n - done);
    if (w <= 0) break;
    done += static_cast<std::size_t>(w);
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (data[i] == '\n') {
      lines_.push_back(std::move(partial_));
      partial_.clear();
      if (lines_.size() > kMaxLines) lines_.pop_front();
    } else if (partial_.size() < kMaxLineBytes) {
      partial_.push_back(data[i]);
      if (partial_.size() == kMaxLineBytes) partial_ += "...";
    }
  }
}

std::string WorkerStderr::Tail() const {
  std::deque<std::string> lines = lines_;
  if (!partial_.empty()) {
    lines.push_back(partial_);
    if (lines.size() > kMaxLines) lines.pop_front();
  }
  return absl::StrJoin(lines, "\n");
}

void WorkerStderr::Close() {
  boost::system::error_code ignored;
  if (pipe_.is_open()) pipe_.close(ignored);
}

}  // namespace raio::node
