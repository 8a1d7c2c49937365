// A spdlog sink that keeps the warnings raio logs while a fuzz input runs, so that a
// fuzzer can check that every connection closed for bad input said why, without
// printing thousands of lines. Thread-safety: as spdlog's base_sink (a mutex).
#pragma once

#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace raio::fuzz {

class CapturingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  // Installs a sink as the default logger's only sink and returns it.
  static std::shared_ptr<CapturingSink> InstallAsDefault() {
    auto sink = std::make_shared<CapturingSink>();
    auto logger = std::make_shared<spdlog::logger>("fuzz", sink);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
    return sink;
  }
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(messages_, {});
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (msg.level >= spdlog::level::warn)
      messages_.emplace_back(msg.payload.data(), msg.payload.size());
  }
  void flush_() override {}

 private:
  std::vector<std::string> messages_;
};

}  // namespace raio::fuzz
