#include "transport/shm/futex_wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <thread>

namespace horo {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

void futex_wait_shared(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds timeout) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1000000) * 1000);
  // Not FUTEX_PRIVATE: the word lives in memory other processes map.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_shared(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void ring(Doorbell& bell) {
  if (bell.sleepers.load(std::memory_order_seq_cst) == 0) return;
  bell.epoch.fetch_add(1, std::memory_order_seq_cst);
  futex_wake_shared(&bell.epoch);
}

bool spin_for(FunctionRef<bool()> ready, std::chrono::microseconds spin, bool yields) {
  if (ready()) return true;
  if (spin.count() <= 0) return false;
  using clock = std::chrono::steady_clock;
  const auto until = clock::now() + spin;
  for (int i = 0;; ++i) {
    // A peer on another core answers within a microsecond or two; after
    // that, yield if asked: with more ranks than cores the one we wait for
    // may need this core (the MPI transport's waits do the same).
    // (A pause costs up to ~140 cycles: 16 x 8 of them stay within a few microseconds.)
    if (i < 16 || !yields) {
      for (int k = 0; k < 8; ++k) cpu_relax();
    } else {
      std::this_thread::yield();
    }
    if (ready()) return true;
    if (i >= 16 && clock::now() >= until) return false;
  }
}

void wait_until(Doorbell& bell, FunctionRef<bool()> ready, std::chrono::microseconds spin,
                std::chrono::microseconds check_every, FunctionRef<void()> on_slow) {
  if (spin_for(ready, spin)) return;
  while (true) {
    // Register, then re-test: a ringer either sees us registered (and bumps
    // the epoch we are about to sleep on) or published before our test.
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t epoch = bell.epoch.load(std::memory_order_seq_cst);
    if (ready()) {
      bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
      return;
    }
    futex_wait_shared(&bell.epoch, epoch, check_every);
    bell.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return;
    if (bell.epoch.load(std::memory_order_relaxed) == epoch) on_slow();  // slept the whole slice
  }
}

}  // namespace horo
