// A blocking HTTP/1.1 client over loopback TCP for the benchmark's HTTP rows (Boost.Beast
// does the HTTP; this file only splits a text/event-stream body into its events and
// times them). One HttpClient is one connection, kept alive between requests.
//
// Thread-safety: one HttpClient per thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace raio::llm::bench {

struct StreamTiming {
  // Seconds from `t0` (PostStream's argument) to each `data:` event other than `[DONE]`
  // and the usage-only chunk, in arrival order.
  std::vector<double> event_s;
  int completion_tokens = 0;  // from the usage chunk (stream_options.include_usage)
};

class HttpClient {
 public:
  // Connects to host:port. Unavailable when the connection is refused.
  static absl::StatusOr<std::unique_ptr<HttpClient>> Connect(const std::string& host, int port);
  ~HttpClient();

  // POSTs a JSON body and returns the response body; InternalError unless 200. Keeps the
  // connection for the next request (the server must not close it).
  absl::StatusOr<std::string> Post(const std::string& target, const std::string& json_body);
  // POSTs a streaming request (`"stream": true`, with include_usage) and reads the event
  // stream to its end (the server closes the connection after `[DONE]`, so the client is
  // spent afterwards). Event times are measured from `t0` (e.g. taken before Connect).
  absl::StatusOr<StreamTiming> PostStream(const std::string& target, const std::string& json_body,
                                          std::chrono::steady_clock::time_point t0);

 private:
  struct Impl;
  explicit HttpClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace raio::llm::bench
