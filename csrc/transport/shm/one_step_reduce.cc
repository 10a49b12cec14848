#include "transport/shm/one_step_reduce.h"

#include "common/copy_bytes.h"
#include "reduce/reduce_kernels.h"

namespace horo {

void OneStepReduce::run(const ReduceCall& c) {
  const int rank = ctx_.rank(), size = ctx_.size();
  ctx_.begin_round();
  copy_bytes(ctx_.slot(rank), c.in, c.bytes());
  if (!c.wants_result(rank)) {  // a reduce's non-root: its input is in, and nothing comes back
    ctx_.step_without_waiting();
    return;
  }
  ctx_.step();
  reduce_to(c.dtype, c.op, c.out, ctx_.slot(0), ctx_.slot(1), c.count);
  for (int p = 2; p < size; ++p) reduce_into(c.dtype, c.op, c.out, ctx_.slot(p), c.count);
  scale_buffer(c.dtype, c.out, c.count, c.scale);
}

}  // namespace horo
