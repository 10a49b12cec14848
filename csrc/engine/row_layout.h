// How a tensor's first dimension is laid out across ranks: the arithmetic the
// CPU executor and the GPU executor share (Horovod's split: the first
// rows % n ranks get one row more).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace horo {

inline size_t elements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  return n;
}

// Elements in one slice along the first dimension.
inline size_t row_elements(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (size_t d = 1; d < shape.size(); ++d) n *= static_cast<size_t>(shape[d]);
  return n;
}

// Rows of a first dimension of `rows` that rank r of n gets, and the rows before rank r's.
inline size_t rows_of_rank(size_t rows, int n, int r) { return rows / n + (static_cast<size_t>(r) < rows % n ? 1 : 0); }
inline size_t rows_before_rank(size_t rows, int n, int r) {
  return static_cast<size_t>(r) * (rows / n) + std::min(static_cast<size_t>(r), rows % n);
}

// Rows rank `me` of n receives from rank r in an exchange, by its agreed `per_rank` rows (an
// allgather's: each rank's; an alltoall's: n x n, from r to j at r * n + j).
inline size_t rows_received(const std::vector<int64_t>& per_rank, bool alltoall, int n, int me, int r) {
  return static_cast<size_t>(alltoall ? per_rank[static_cast<size_t>(r) * n + me] : per_rank[r]);
}

}  // namespace horo
