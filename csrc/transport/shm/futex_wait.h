// Waiting on memory that another process writes: spin briefly (a peer on
// another core answers within a microsecond or two), then sleep on a futex
// in the shared segment so a rank that waits does not take the core the
// awaited rank needs (np=4 on 2 cores). Sleeps are bounded so a dead peer is
// noticed instead of waited for forever.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "common/function_ref.h"

namespace horo {

// Blocks while *word == expected (or until `timeout`); any process that has
// the word mapped may wake it. Returns at once if the value already differs.
void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout);
void futex_wake_shared(std::atomic<uint32_t>* word);

// A doorbell in shared memory: waiters register before they sleep, so a
// ringer that sees nobody registered skips the system call.
struct Doorbell {
  std::atomic<uint32_t> epoch{0};
  std::atomic<uint32_t> sleepers{0};
};

// Ring after publishing whatever the waiters test (the store before it must
// be seq_cst, or at least ordered before this load).
void ring(Doorbell& bell);

// Spins with a CPU pause (after a few microseconds yielding the core, if
// `yields`) until ready() holds or `spin` has passed; returns ready().
bool spin_for(FunctionRef<bool()> ready, std::chrono::microseconds spin, bool yields = true);

// Returns when ready() holds. Spins (with a CPU pause) for `spin`, then
// sleeps on `bell` in slices of `check_every`; after each slice that ends
// with ready() still false, calls on_slow() (which may throw, e.g. on a dead
// peer) so a wait never outlives the job.
void wait_until(Doorbell& bell, FunctionRef<bool()> ready, std::chrono::microseconds spin,
                std::chrono::microseconds check_every, FunctionRef<void()> on_slow);

}  // namespace horo
