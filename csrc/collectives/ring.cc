#include "collectives/ring.h"
#include "common/copy_bytes.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce_kernels.h"

namespace horo {

RingLayout RingLayout::even(size_t elements, int ranks) {
  std::vector<size_t> counts(ranks, elements / ranks);
  for (size_t i = 0; i < elements % ranks; ++i) ++counts[i];
  return from_counts(counts);
}

RingLayout RingLayout::from_counts(const std::vector<size_t>& counts) {
  RingLayout layout;
  layout.assign(counts);
  return layout;
}

void RingLayout::assign(const std::vector<size_t>& counts) {
  count = counts;
  offset.resize(counts.size());
  size_t at = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offset[r] = at;
    at += counts[r];
  }
}

void Ring::allreduce(Transport& t, const RingLayout& layout, const void* input, void* output, DataType dtype,
                     ReduceOp op, double scale) {
  const char* in = static_cast<const char*>(input);
  const int left_segment = (t.rank() + t.size() - 1) % t.size();
  run(t, kReduceScatter | kAllGather, layout, in + layout.offset[left_segment] * dtype_size(dtype), in,
      static_cast<char*>(output), dtype, op, scale);
}

void Ring::reduce_scatter(Transport& t, const RingLayout& layout, const void* input, void* output, DataType dtype,
                          ReduceOp op) {
  const char* in = static_cast<const char*>(input);
  const int left_segment = (t.rank() + t.size() - 1) % t.size();
  run(t, kReduceScatter, layout, in + layout.offset[left_segment] * dtype_size(dtype), in,
      static_cast<char*>(output), dtype, op);
}

void Ring::allgather(Transport& t, const RingLayout& layout, const void* mine, void* output, DataType dtype) {
  char* out = static_cast<char*>(output);
  char* my_segment = out + layout.offset[t.rank()] * dtype_size(dtype);
  if (mine != my_segment) copy_bytes(my_segment, mine, layout.count[t.rank()] * dtype_size(dtype));
  run(t, kAllGather, layout, my_segment, out, out, dtype, ReduceOp::kSum);
}

void Ring::run(Transport& t, int phases, const RingLayout& layout, const char* first_send, const char* input,
               char* output, DataType dtype, ReduceOp op, double scale) {
  const int n = t.size(), r = t.rank();
  const size_t esize = dtype_size(dtype);
  if (n == 1) {
    if (input != output && (phases & kReduceScatter)) copy_bytes(output, input, layout.total() * esize);
    scale_buffer(dtype, output, layout.total(), scale);
    return;
  }
  const size_t chunk_elems = std::max<size_t>(1, chunk_bytes_ / esize);
  const size_t slot_bytes = chunk_elems * esize;
  if ((phases & kReduceScatter) && scratch_.size() < kWindow * slot_bytes) scratch_.resize(kWindow * slot_bytes);

  auto mod = [n](int x) { return ((x % n) + n) % n; };
  const int right = mod(r + 1), left = mod(r - 1);
  // Step i sends segment `send` and receives `recv`, which is what step i+1
  // sends: what arrives at one step is exactly what leaves at the next.
  struct Step {
    int send, recv;
    bool reduce;
  };
  std::vector<Step> steps;
  if (phases & kReduceScatter) {
    for (int s = 0; s < n - 1; ++s) steps.push_back({mod(r - s - 1), mod(r - s - 2), true});
  }
  if (phases & kAllGather) {
    for (int s = 0; s < n - 1; ++s) steps.push_back({mod(r - s), mod(r - s - 1), false});
  }
  const int nsteps = static_cast<int>(steps.size());

  auto chunks_of = [&](int seg) { return (layout.count[seg] + chunk_elems - 1) / chunk_elems; };
  auto chunk_length = [&](int seg, size_t k) { return std::min(chunk_elems, layout.count[seg] - k * chunk_elems); };
  auto at = [&](int seg, size_t k) { return (layout.offset[seg] + k * chunk_elems) * esize; };

  std::vector<std::vector<int>> sends(nsteps);
  for (size_t k = 0; k < chunks_of(steps[0].send); ++k) {
    sends[0].push_back(t.isend(first_send + k * chunk_elems * esize, chunk_length(steps[0].send, k) * esize, right));
  }
  int recv_slots[kWindow];
  for (int s = 0; s < nsteps; ++s) {
    // Later steps overwrite what earlier ones sent (the all-gather lands on
    // segments this rank passed on while reducing); finishing the previous
    // step's sends first keeps those bytes stable until they are read.
    if (s > 0) {
      for (int slot : sends[s - 1]) t.wait(slot);
    }
    const int seg = steps[s].recv;
    const bool reduce = steps[s].reduce;
    const size_t nchunks = chunks_of(seg);
    auto landing = [&](size_t k) { return scratch_.data() + (k % kWindow) * slot_bytes; };
    auto post = [&](size_t k) {
      char* dst = reduce ? landing(k) : output + at(seg, k);
      recv_slots[k % kWindow] = t.irecv(dst, chunk_length(seg, k) * esize, left);
    };
    for (size_t k = 0; k < std::min<size_t>(kWindow, nchunks); ++k) post(k);
    for (size_t k = 0; k < nchunks; ++k) {
      t.wait(recv_slots[k % kWindow]);
      const size_t len = chunk_length(seg, k);
      // A segment arrives at most once per reduce-scatter, so its local
      // contribution is still the untouched input.
      if (reduce && input == output) reduce_into(dtype, op, output + at(seg, k), landing(k), len);
      if (reduce && input != output) reduce_to(dtype, op, output + at(seg, k), input + at(seg, k), landing(k), len);
      // The last reduce-scatter step finishes this rank's own segment.
      if (reduce && seg == r) scale_buffer(dtype, output + at(seg, k), len, scale);
      if (k + kWindow < nchunks) post(k + kWindow);
      if (s + 1 < nsteps) sends[s + 1].push_back(t.isend(output + at(seg, k), len * esize, right));
    }
  }
  for (int slot : sends[nsteps - 1]) t.wait(slot);
}

}  // namespace horo
