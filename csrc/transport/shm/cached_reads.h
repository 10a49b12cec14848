// Whether a direct read (process_vm_readv) found its peer's lines already in this core's caches,
// judged by how long it took. A broadcast's receiver reads a root's input that has not changed since
// its last read (weights broadcast again unchanged, a benchmark's loop) at the speed of a copy
// within its own core; a root's input written since comes line by line from the writer's core,
// about twice as slow (MEASUREMENTS.md, "Shared-memory data paths").
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
  // Margins over the probe's own-memory reads that cached reads stayed within and fresh ones did not.
  static constexpr double kFixedWithin = 2.0, kBytesWithin = 1.8;
  // Measured on first use: process_vm_readv of this process's own memory, 4 and 64 KiB, lines
  // in cache (the fastest of several), as fixed_ns_ + bytes * ns_per_byte_.
  void measure();
  double fixed_ns_ = -1;
  double ns_per_byte_ = 0;
};

}  // namespace horo
