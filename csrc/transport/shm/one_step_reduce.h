// Small allreduces and reduces in one step instead of two: every rank copies its whole input into
// its slot, and every rank that wants the result reduces the whole buffer from every slot, in
// rank order, so all ranks hold identical bits.
#pragma once

#include <algorithm>
#include <cstddef>

#include "transport/shm/calls.h"
#include "transport/shm/context.h"

namespace horo {

class OneStepReduce {
 public:
  explicit OneStepReduce(ShmContext& ctx)
      : ctx_(ctx), small_bytes_(std::min<size_t>(ctx.thresholds().small_bytes, ctx.chunk())) {}

  bool eligible(const ReduceCall& c) const { return c.bytes() <= small_bytes_; }
  void run(const ReduceCall& c);

 private:
  ShmContext& ctx_;
  const size_t small_bytes_;  // the policy's, as far as one half-slot holds
};

}  // namespace horo
