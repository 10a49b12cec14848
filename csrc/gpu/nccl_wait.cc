#include "gpu/nccl_wait.h"

#include <thread>

namespace horo {

WaitVerdict wait_verdict(bool done, nccl::Result async, double elapsed_seconds, double timeout_seconds) {
  if (async != nccl::kSuccess && async != nccl::kInProgress) return WaitVerdict::kFailed;
  if (done) return WaitVerdict::kDone;
  if (timeout_seconds > 0 && elapsed_seconds >= timeout_seconds) return WaitVerdict::kTimedOut;
  return WaitVerdict::kWait;
}

const char* verdict_name(WaitVerdict verdict) {
  switch (verdict) {
    case WaitVerdict::kDone: return "done";
    case WaitVerdict::kWait: return "wait";
    case WaitVerdict::kFailed: return "failed";
    case WaitVerdict::kTimedOut: return "timed out";
  }
  return "?";
}

WaitVerdict wait_in_slices(const std::function<WaitProbe()>& probe, double timeout_seconds,
                           std::chrono::microseconds slice) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const WaitProbe now = probe();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const WaitVerdict verdict = wait_verdict(now.done, now.async, elapsed, timeout_seconds);
    if (verdict != WaitVerdict::kWait) return verdict;
    // Short first: most waits end within microseconds, and the slice bounds the rest.
    std::this_thread::sleep_for(elapsed < 0.001 ? std::chrono::microseconds(20) : slice);
  }
}

}  // namespace horo
