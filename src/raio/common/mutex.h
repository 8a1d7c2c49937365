// raio::Mutex, raio::MutexLock and raio::CondVar: absl's, except under ThreadSanitizer.
//
// Debian's abseil is not built with TSan, so TSan cannot see the happens-before edges of
// absl::Mutex (its lock and unlock live in the uninstrumented library) and would report
// every access it guards as a race. A TSan build (`make tsan`) therefore uses these
// std::mutex-based stand-ins, which TSan understands; every other build uses absl's types
// directly (zero cost). Both carry the clang thread-safety annotations, so
// `-Wthread-safety` checks the same code either way.
// Thread-safety: as absl::Mutex / absl::CondVar.
#pragma once

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

#if defined(__SANITIZE_THREAD__)
#define RAIO_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RAIO_TSAN 1
#endif
#endif

#ifdef RAIO_TSAN
#include <chrono>
#include <condition_variable>
#include <mutex>
#endif

namespace raio {

// Debian's abseil is built without NDEBUG, so every absl::Mutex::Lock also runs its
// lock-order (deadlock) detector: about 500 instructions per Lock, 2.6% of a driver's
// instructions in a loop of actor calls (callgrind). raio's optimized builds turn it off
// at start-up, as an optimized abseil has it; debug builds (make sanitize) keep it.
inline void UseOptimizedMutexes() {
#ifdef NDEBUG
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#endif
}

#ifndef RAIO_TSAN

using Mutex = absl::Mutex;
using MutexLock = absl::MutexLock;
using CondVar = absl::CondVar;

#else

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) { return mu_.try_lock(); }
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // As absl::CondVar::WaitWithDeadline: true when the deadline passed (may also wake
  // spuriously, as absl's).
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mu->native(), std::adopt_lock);
    bool timed_out = false;
    if (deadline == absl::InfiniteFuture()) {
      cv_.wait(lock);
    } else {
      timed_out = cv_.wait_until(lock, absl::ToChronoTime(deadline)) == std::cv_status::timeout;
    }
    lock.release();  // still held, by the caller
    return timed_out;
  }
  void Wait(Mutex* mu) { WaitWithDeadline(mu, absl::InfiniteFuture()); }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

#endif

}  // namespace raio
