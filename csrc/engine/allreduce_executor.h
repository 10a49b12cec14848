// Runs one fusion group of agreed allreduce responses on this rank's
// buffers: pre-scale on the way in, one in-place reduction by the chosen
// algorithm, post-scale (and Average's 1/n) on the way out.
#pragma once

#include <vector>

#include "collectives/ring.h"
#include "common/tunables.h"
#include "engine/fusion_buffer.h"
#include "engine/tensor_queue.h"
#include "transport/transport.h"

namespace horo {

class AllreduceExecutor {
 public:
  AllreduceExecutor(Transport& transport, const Tunables& tunables)
      : transport_(transport), tunables_(tunables), ring_(tunables.ring_chunk_bytes) {}

  // `entries` all share dtype, op and scale factors.
  void run(std::vector<TensorEntry>& entries);

 private:
  void reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op);

  Transport& transport_;
  const Tunables& tunables_;
  Ring ring_;
  FusionBuffer fusion_;
};

}  // namespace horo
