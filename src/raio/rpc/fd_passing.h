// Passing a file descriptor between processes on one host: a short message sent on a
// connected Unix stream socket with the descriptor attached as SCM_RIGHTS ancillary
// data (unix(7)). The kernel installs a new descriptor for the same open file in the
// receiver. TCP sockets cannot carry descriptors: both functions refuse them.
//
// raio uses this once per connection, before the framed RPC stream starts: a listener
// made with a descriptor for its peers (Listener::ListenUnix) sends kFdGreeting with it
// to every peer it accepts, and ConnectUnixReceivingFd reads it off before handing the
// socket to a Connection. The node daemon hands its object store's memory to local
// drivers and workers this way, so that the store needs no name in the file system.
//
// Thread-safety: all functions are thread-safe; each blocks its caller for at most the
// given timeout.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "raio/common/unique_fd.h"

namespace raio::rpc {

// The bytes a listener sends with the descriptor it hands each peer.
inline constexpr std::string_view kFdGreeting = "RAIO-FD1";

// Sends `message` (not empty) on the connected Unix stream socket `socket` with one
// copy of `fd` attached to its first byte. The caller keeps `fd`. Waits at most
// `timeout` for room in the socket's buffer (a fresh socket always has room). Errors:
// InvalidArgument (empty message, `fd` or `socket` not an open descriptor, `socket`
// not a Unix socket), DeadlineExceeded, Unavailable (the peer closed), Internal (other
// errno, with its text).
[[nodiscard]] absl::Status SendFd(int socket, std::string_view message, int fd,
                                  std::chrono::milliseconds timeout);

struct ReceivedFd {
  std::string message;  // exactly the bytes asked for
  UniqueFd fd;          // close-on-exec
};
// Reads exactly `message_bytes` (> 0) from the connected Unix stream socket `socket`
// and the one descriptor attached to them, waiting at most `timeout` in all; reads
// nothing past them, so the stream that follows is left intact. Errors:
// InvalidArgument (`socket` is not a Unix socket, e.g. TCP: descriptors cannot cross
// hosts), DeadlineExceeded, Unavailable (the peer closed first), DataLoss (no
// descriptor came with the bytes, or more than one, or the kernel truncated them;
// every descriptor received is closed), Internal (other errno, with its text).
[[nodiscard]] absl::StatusOr<ReceivedFd> ReceiveFd(int socket, std::size_t message_bytes,
                                                   std::chrono::milliseconds timeout);

}  // namespace raio::rpc
