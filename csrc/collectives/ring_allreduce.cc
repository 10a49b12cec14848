#include "collectives/ring_allreduce.h"

#include <algorithm>
#include <cstring>

#include "reduce/reduce_kernels.h"

namespace horo {

void RingAllreduce::run(Transport& transport, const void* input, void* output, size_t count, DataType dtype,
                        ReduceOp op) {
  const int n = transport.size();
  const int r = transport.rank();
  if (n == 1 || count == 0) {
    if (input != output) std::memcpy(output, input, count * dtype_size(dtype));
    return;
  }

  const size_t esize = dtype_size(dtype);
  const size_t chunk_elems = std::max<size_t>(1, chunk_bytes_ / esize);
  const size_t slot_bytes = chunk_elems * esize;
  if (scratch_.size() < kWindow * slot_bytes) scratch_.resize(kWindow * slot_bytes);
  char* data = static_cast<char*>(output);
  const char* in = static_cast<const char*>(input);

  // Segment i: the first count % n segments hold one element more.
  const size_t base = count / n, extra = count % n;
  auto seg_offset = [&](int i) { return i * base + std::min<size_t>(i, extra); };
  auto seg_length = [&](int i) { return base + (static_cast<size_t>(i) < extra ? 1 : 0); };
  auto mod = [n](int x) { return ((x % n) + n) % n; };

  // Step s < n-1 reduce-scatters, the rest all-gather. What a rank receives
  // at step s is exactly what it sends at step s+1.
  const int steps = 2 * (n - 1);
  auto send_segment = [&](int s) { return s < n - 1 ? mod(r - s) : mod(r + 1 - (s - (n - 1))); };
  auto recv_segment = [&](int s) { return s < n - 1 ? mod(r - s - 1) : mod(r - (s - (n - 1))); };
  const int right = mod(r + 1), left = mod(r - 1);

  auto chunks_of = [&](int seg) { return (seg_length(seg) + chunk_elems - 1) / chunk_elems; };
  auto chunk_range = [&](int seg, size_t k, size_t* offset, size_t* length) {
    *offset = seg_offset(seg) + k * chunk_elems;
    *length = std::min(chunk_elems, seg_length(seg) - k * chunk_elems);
  };

  std::vector<std::vector<int>> sends(steps);
  {
    const int seg = send_segment(0);
    for (size_t k = 0; k < chunks_of(seg); ++k) {
      size_t off, len;
      chunk_range(seg, k, &off, &len);
      sends[0].push_back(transport.isend(in + off * esize, len * esize, right));
    }
  }

  int recv_slots[kWindow];
  for (int s = 0; s < steps; ++s) {
    // The all-gather later overwrites what an earlier step sent; finishing
    // the previous step's sends first keeps those bytes stable until read.
    if (s > 0) {
      for (int slot : sends[s - 1]) transport.wait(slot);
    }
    const int seg = recv_segment(s);
    const bool reduce = s < n - 1;
    const size_t nchunks = chunks_of(seg);
    auto post = [&](size_t k) {
      size_t off, len;
      chunk_range(seg, k, &off, &len);
      char* dst = reduce ? scratch_.data() + (k % kWindow) * slot_bytes : data + off * esize;
      recv_slots[k % kWindow] = transport.irecv(dst, len * esize, left);
    };
    for (size_t k = 0; k < std::min<size_t>(kWindow, nchunks); ++k) post(k);
    for (size_t k = 0; k < nchunks; ++k) {
      transport.wait(recv_slots[k % kWindow]);
      size_t off, len;
      chunk_range(seg, k, &off, &len);
      // A segment is received at most once per reduce-scatter, so its local
      // contribution is still the untouched input.
      const char* landed = scratch_.data() + (k % kWindow) * slot_bytes;
      if (reduce && in == data) reduce_into(dtype, op, data + off * esize, landed, len);
      if (reduce && in != data) reduce_to(dtype, op, data + off * esize, in + off * esize, landed, len);
      if (k + kWindow < nchunks) post(k + kWindow);
      if (s + 1 < steps) sends[s + 1].push_back(transport.isend(data + off * esize, len * esize, right));
    }
  }
  for (int slot : sends[steps - 1]) transport.wait(slot);
}

}  // namespace horo
