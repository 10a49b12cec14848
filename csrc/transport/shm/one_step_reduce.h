// Small allreduces and reduces in one step instead of two: every rank copies its whole input into
// its slot, and every rank that wants the result reduces the whole buffer from every slot, in
// rank order, so all ranks hold identical bits.
#pragma once

#include <cstddef>

#include "transport/shm/calls.h"
#include "transport/shm/context.h"

namespace horo {

class OneStepReduce {
 public:
  static constexpr ShmPath kPath = ShmPath::kOneStepReduce;
  explicit OneStepReduce(ShmContext& ctx) : ctx_(ctx) {}

  bool eligible(const ReduceCall& c) const { return ctx_.path_eligible(kPath, c.type(), c.bytes()); }
  void run(const ReduceCall& c);

 private:
  ShmContext& ctx_;
};

}  // namespace horo
