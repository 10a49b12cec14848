#include "engine/allreduce_executor.h"

#include "reduce/reduce_kernels.h"

namespace horo {

void AllreduceExecutor::reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) {
  const std::string& algo = tunables_.allreduce_algo;
  const bool use_ring =
      algo == "ring" ||
      (algo == "auto" && static_cast<int64_t>(count * dtype_size(dtype)) >= tunables_.ring_min_bytes);
  if (use_ring || !transport_.native_allreduce(input, output, count, dtype, op)) {
    ring_.allreduce(transport_, RingLayout::even(count, transport_.size()), input, output, dtype, op);
  }
}

void AllreduceExecutor::run(std::vector<TensorEntry>& entries) {
  const Request& spec = entries.front().request;
  const DataType dtype = spec.dtype;
  const size_t esize = dtype_size(dtype);
  double postscale = spec.postscale;
  if (spec.op == ReduceOp::kAverage) postscale /= transport_.size();

  if (entries.size() == 1) {
    // No staging: the algorithm reads the input and writes the output directly.
    TensorEntry& e = entries.front();
    const size_t count = static_cast<size_t>(e.request.num_elements());
    const void* input = e.input;
    if (spec.prescale != 1.0) {
      copy_scaled(dtype, e.output, e.input, count, spec.prescale);
      input = e.output;
    }
    reduce(input, e.output, count, dtype, spec.op);
    scale_buffer(dtype, e.output, count, postscale);
    return;
  }

  size_t total = 0;
  for (const auto& e : entries) total += static_cast<size_t>(e.request.num_elements());
  char* buf = fusion_.reserve(total * esize);
  size_t offset = 0;
  for (const auto& e : entries) {
    const size_t count = static_cast<size_t>(e.request.num_elements());
    copy_scaled(dtype, buf + offset * esize, e.input, count, spec.prescale);
    offset += count;
  }
  reduce(buf, buf, total, dtype, spec.op);
  offset = 0;
  for (auto& e : entries) {
    const size_t count = static_cast<size_t>(e.request.num_elements());
    copy_scaled(dtype, e.output, buf + offset * esize, count, postscale);
    offset += count;
  }
}

}  // namespace horo
