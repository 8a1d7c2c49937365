// WorkerStderr: one worker process's stderr, read from a pipe by its node. Everything read
// is forwarded to the node's own stderr as it arrives (so the user still sees what workers
// print), and the last few lines are kept, so that a worker that dies while starting can
// be reported with what it said.
// Threading: not thread-safe; lives on the node daemon's loop. The object keeps itself
// alive while a read is outstanding; Close() ends that.
#pragma once

#include <array>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <cstddef>
#include <deque>
#include <memory>
#include <string>

namespace raio::node {

class WorkerStderr : public std::enable_shared_from_this<WorkerStderr> {
 public:
  // Lines kept, and the longest line kept (longer ones are cut, with "...").
  static constexpr std::size_t kMaxLines = 20;
  static constexpr std::size_t kMaxLineBytes = 512;

  // Takes ownership of `read_fd` (the read end of the worker's stderr pipe) and starts
  // reading it on `io`.
  static std::shared_ptr<WorkerStderr> Start(boost::asio::io_context& io, int read_fd);

  // Reads whatever the pipe still holds without blocking: call after the process exited,
  // before Tail(), so that its last words are not still in flight.
  void Drain();
  // The last lines read (at most kMaxLines), oldest first, joined with "\n"; a last line
  // without its newline included. Empty when the worker printed nothing.
  std::string Tail() const;
  // Stops reading and closes the pipe. Idempotent.
  void Close();

 private:
  WorkerStderr(boost::asio::io_context& io, int read_fd);
  void ReadMore();
  // Forwards `n` bytes and splits them into lines.
  void Consume(const char* data, std::size_t n);

  boost::asio::posix::stream_descriptor pipe_;
  std::array<char, 4096> buf_{};
  std::deque<std::string> lines_;
  std::string partial_;
};

}  // namespace raio::node
