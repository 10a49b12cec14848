// Whether a direct read (process_vm_readv) found its peer's lines already in this core's caches,
// judged by how long it took. A broadcast's receiver reads a root's input that has not changed since
// its last read (weights broadcast again unchanged, a benchmark's loop) at the speed of a copy
// within its own core; a root's input written since comes line by line from the writer's core.
// np=2, 2-core VM, medians of 300 reads: 16 / 32 / 64 / 128 KiB took 1.5 / 2.0 / 3.2 / 5.9 µs
// unchanged against 2.5 / 4.2 / 7.7 / 15.9 written afresh.
#pragma once

#include <chrono>
#include <cstddef>

namespace horo {

class CachedReads {
 public:
  // A read of `bytes` that took `took`: within kFixedWithin of the fixed cost of a read of this
  // process's own cached memory and kBytesWithin of its cost per byte.
  bool cached(size_t bytes, std::chrono::nanoseconds took);

 private:
  // The cached reads above took 0.6-1.5 µs more than such reads (4 KiB: 0.4 µs, 64 KiB: 2.5),
  // those written afresh 1.4-11 µs more.
  static constexpr double kFixedWithin = 2.0, kBytesWithin = 1.8;
  // Measured on first use: process_vm_readv of this process's own memory, 4 and 64 KiB, lines
  // in cache (the fastest of several), as fixed_ns_ + bytes * ns_per_byte_.
  void measure();
  double fixed_ns_ = -1;
  double ns_per_byte_ = 0;
};

}  // namespace horo
