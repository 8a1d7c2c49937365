// The jobs API's HTTP front (Boost.Beast, HTTP/1.1): each request is parsed with body
// limits and answered by Route (job_router.h) over a JobBackend; GET
// /api/jobs/{id}/logs/tail upgrades to a WebSocket that sends the job's log as text
// messages as it grows and closes once the job is terminal and its log sent.
// One thread per connection (as the LLM server): a connection blocks only on its own
// socket and, while tailing, on polling its job's log.
// Thread-safety: Start and Stop from one thread; the server's own threads do the rest.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "raio/jobs/job_router.h"

namespace raio::jobs {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8265;  // 0: any free port
  // Body limit of every request but PUT /api/packages (which takes the backend's
  // MaxPackageBytes): a larger body is answered 413.
  size_t max_body_bytes = 1 << 20;
  // A kept-alive connection with no new request for this long is closed.
  std::chrono::milliseconds keep_alive_timeout{5000};
  // A request's header must arrive within this long of its first byte, and its body may
  // pause no longer than this between reads; past either the server answers 408 and
  // closes, so a client that trickles a request (slowloris) cannot hold a thread.
  std::chrono::milliseconds request_read_timeout{30000};
  // How often a logs/tail WebSocket looks for new log bytes.
  std::chrono::milliseconds tail_poll_interval{50};
};

class HttpServer {
 public:
  // `backend` must outlive the server.
  HttpServer(JobBackend* backend, HttpServerOptions options);
  ~HttpServer();  // Stop()

  // Binds and starts accepting. Returns the bound port. InvalidArgument for a host that is
  // not an IP address; Unavailable when the address cannot be bound.
  absl::StatusOr<int> Start();
  // Stops accepting, shuts every open connection down and joins their threads.
  void Stop();

 private:
  struct Connection;
  struct Impl;
  void AcceptLoop();
  void Serve(Connection* c);
  void Tail(Connection* c, const std::string& id, void* request);
  void ReapFinished();

  JobBackend* backend_;
  HttpServerOptions options_;
  std::unique_ptr<Impl> impl_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards connections_
  std::list<std::unique_ptr<Connection>> connections_;
};

}  // namespace raio::jobs
