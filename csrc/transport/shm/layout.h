// How the shared-memory paths cut a collective's buffers: into pieces a round carries, and
// into one slice per rank for a reduce-scatter. Every rank computes the same cuts from sizes
// every rank knows, so no step is spent agreeing on them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace horo {

// No two ranks write one cache line: slots, slices and pieces start on one.
constexpr size_t kLine = 64;

inline size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }
inline size_t round_down(size_t n, size_t to) { return n / to * to; }

// Where each rank's part starts in a buffer of the parts laid end to end.
inline std::vector<size_t> prefix_offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> out(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) out[i] = out[i - 1] + counts[i - 1];
  return out;
}

// Piece of `total` bytes that round k carries, `per_round` bytes a round.
inline size_t piece(size_t total, size_t k, size_t per_round) {
  const size_t start = k * per_round;
  return start >= total ? 0 : std::min(per_round, total - start);
}

// Rank r's elements [lo, hi) of `count` (of `esize` bytes) among `size` ranks, in a
// reduce-scatter by slices (allreduce, reduce).
inline std::pair<size_t, size_t> slice_of(int r, int size, size_t count, size_t esize) {
  const size_t align = std::max<size_t>(1, kLine / esize);
  const size_t slice = ceil_div(ceil_div(count, size), align) * align;
  const size_t lo = std::min(count, r * slice);
  return {lo, std::min(count, lo + slice)};
}

}  // namespace horo
