// How horo waits on NCCL work it cannot see the end of: a non-blocking
// communicator's init, or a collective's completion event. NCCL reports a
// failure (a peer gone, a network error) only through ncclCommGetAsyncError,
// and a hang not at all, so each wait polls in slices: done, failed, or past
// its deadline. The decision is kept apart from the library calls so that it
// is tested without a GPU (tests/test_gpu_libraries.py).
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include "gpu/nccl_api.h"

namespace horo {

enum class WaitVerdict {
  kDone,      // the work finished and NCCL reports no error
  kWait,      // not yet: poll again after a slice
  kFailed,    // NCCL reports an error: the communicator must be aborted
  kTimedOut,  // past the deadline: presumed hung, the communicator must be aborted
};

// `done`: the awaited work finished; `async`: ncclCommGetAsyncError's answer;
// `timeout_seconds` <= 0 waits without a deadline. An error wins over completion:
// a collective that "finished" on a failed communicator may have written garbage.
WaitVerdict wait_verdict(bool done, nccl::Result async, double elapsed_seconds, double timeout_seconds);
const char* verdict_name(WaitVerdict verdict);

struct WaitProbe {
  bool done;
  nccl::Result async;
};

// Polls `probe` every `slice` until the verdict is no longer kWait.
WaitVerdict wait_in_slices(const std::function<WaitProbe()>& probe, double timeout_seconds,
                           std::chrono::microseconds slice = std::chrono::milliseconds(50));

}  // namespace horo
