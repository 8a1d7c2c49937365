// The OpenAI-compatible HTTP front of an engine (an EngineClient: in-process or in an actor)
// (Boost.Beast, HTTP/1.1): POST /v1/completions and /v1/chat/completions (JSON, or server-sent
// events with `stream: true`), GET /v1/models, /health and /metrics (Prometheus text, vLLM names).
// One thread per connection: a connection blocks only on its own socket and on polling
// its request's outputs. A client that goes
// away (stream write fails, or the socket reads EOF while it waits) has its request
// aborted, which frees its KV blocks at the next step.
//
// Thread-safety: Start and Stop from one thread; the server's own threads do the rest.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "raio/llm/engine_client.h"

namespace raio::llm {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  size_t max_body_bytes = 4 << 20;
  // A kept-alive connection with no new request for this long is closed (vLLM's
  // uvicorn closes after 5 s too), so that idle clients do not hold a thread each.
  absl::Duration keep_alive_timeout = absl::Seconds(5);
};

class OpenAiServer {
 public:
  // `engine` must outlive the server.
  OpenAiServer(EngineClient* engine, ServerOptions options);
  ~OpenAiServer();  // Stop()

  // Binds and starts accepting. Returns the bound port. Unavailable when the address
  // cannot be bound.
  absl::StatusOr<int> Start();
  // Stops accepting, shuts every open connection down and joins their threads.
  void Stop();

 private:
  struct Connection;
  void AcceptLoop();
  void Serve(Connection* c);
  void ReapFinished() ABSL_LOCKS_EXCLUDED(mu_);

  EngineClient* engine_;
  ServerOptions options_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace raio::llm
