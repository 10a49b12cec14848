// Ring all-reduce: n-1 reduce-scatter steps, then n-1 all-gather steps, each
// rank sending to its right neighbour and receiving from its left. Each
// segment moves in chunks small enough to stay in L2, and a chunk is sent on
// as soon as it is reduced, so the ring is pipelined across steps.
#pragma once

#include <cstddef>
#include <vector>

#include "common/types.h"
#include "transport/transport.h"

namespace horo {

class RingAllreduce {
 public:
  explicit RingAllreduce(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

  // Reduces `count` elements of `input` across every rank of `transport`
  // into `output` (which may be `input`). Out of place, the input is read
  // where it lies and never copied: each segment's first reduction writes
  // input (op) received into the output. Every rank ends with bit-identical
  // values: each segment is reduced once, in ring order, by one rank, then
  // copied to the others.
  void run(Transport& transport, const void* input, void* output, size_t count, DataType dtype, ReduceOp op);

 private:
  static constexpr int kWindow = 4;  // receives posted ahead per step
  size_t chunk_bytes_;
  std::vector<char> scratch_;  // kWindow landing slots for reduce-scatter chunks
};

}  // namespace horo
