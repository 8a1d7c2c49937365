// The one notion of test time: every deadline, poll bound and product timeout that a test
// sets (or exports to daemons and workers) goes through TimeScale() / Scaled(), as gRPC's
// grpc_test_slowdown_factor() and Chromium's TestTimeouts do. A sanitizer or an unoptimised
// build runs everything several times slower, and a loaded CI machine slower still; one
// factor, set per build, keeps a test's bounds honest in all of them without loosening
// the optimised build's.
//
// The factor is detected at compile time (the same table as cmake/RaioTestTimeScale.cmake,
// which scales the ctest TIMEOUT properties):
//   optimised build 1; unoptimised (no __OPTIMIZE__, a Debug build) x2; AddressSanitizer
//   x2.5; ThreadSanitizer x4. So: Release/RelWithDebInfo 1, Debug 2, ASan Debug 5, TSan
//   RelWithDebInfo 4.
// RAIO_TEST_TIME_SCALE (a positive number) in the environment overrides it at run time,
// e.g. on a machine known to be slow.
//
// Header-only, so that unit tests, integration tests and test drivers (which link only the
// installed raio::raio) all use the same function. Thread-safety: stateless after the first
// call (a function-local static).
#pragma once

#include <chrono>
#include <cstdlib>

namespace raio::testkit {

// The factor this build's tests were compiled with, before any environment override.
constexpr double BuildTimeScale() {
  double scale = 1.0;
#if !defined(__OPTIMIZE__)
  scale *= 2.0;
#endif
#if defined(__SANITIZE_ADDRESS__)
  scale *= 2.5;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  scale *= 2.5;
#endif
#endif
#if defined(__SANITIZE_THREAD__)
  scale *= 4.0;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  scale *= 4.0;
#endif
#endif
  return scale;
}

// The factor every test duration is multiplied by: RAIO_TEST_TIME_SCALE when it is set to
// a positive number, else BuildTimeScale(). Read once per process.
inline double TimeScale() {
  static const double scale = [] {
    if (const char* env = std::getenv("RAIO_TEST_TIME_SCALE")) {
      char* end = nullptr;
      double v = std::strtod(env, &end);
      if (end != env && v > 0) return v;
    }
    return BuildTimeScale();
  }();
  return scale;
}

// `d` times TimeScale(), in the same duration type (truncated to its ticks, and never less
// than `d`).
template <typename Rep, typename Period>
std::chrono::duration<Rep, Period> Scaled(std::chrono::duration<Rep, Period> d) {
  using D = std::chrono::duration<Rep, Period>;
  auto scaled = std::chrono::duration_cast<D>(
      std::chrono::duration<double, Period>(static_cast<double>(d.count()) * TimeScale()));
  return scaled < d ? d : scaled;
}

// Scaled(d) in whole milliseconds: for config values exported to daemons and workers
// (`health_check_timeout_ms`, ...).
template <typename Rep, typename Period>
long long ScaledMs(std::chrono::duration<Rep, Period> d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Scaled(d)).count();
}

}  // namespace raio::testkit
