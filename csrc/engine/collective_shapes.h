// The shapes of a fusion group's collective, which the CPU executor and the GPU executor share:
// how tensors are packed into the fusion buffer and copied back out, how many bytes go to and
// come from each rank, and the shape of each output the core allocates. Copies go through a
// callable, so each executor moves the bytes its own way (copy_scaled, a stream copy).
// Functions that fill a per-rank vector resize it: one kept from call to call allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/function_ref.h"
#include "engine/row_layout.h"
#include "engine/tensor_queue.h"
#include "wire/messages.h"

namespace horo {

// Copies `count` elements from `src` to `dst`.
using CopyElements = FunctionRef<void(char* dst, const char* src, size_t count)>;

// A tensor's first dimension; a scalar counts as one row.
inline size_t first_dim(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : static_cast<size_t>(shape[0]);
}
// Elements of rank r's rows of `shape` (a reducescatter's or scatter's share).
inline size_t rank_elements(const std::vector<int64_t>& shape, int n, int r) {
  return rows_of_rank(first_dim(shape), n, r) * row_elements(shape);
}

// `counts` times `esize`, into `bytes`.
void to_bytes(const std::vector<size_t>& counts, size_t esize, std::vector<size_t>& bytes);

// Fused allreduce and broadcast: the tensors one after another in the fusion buffer.
size_t total_elements(const std::vector<TensorEntry>& entries);
void pack(const std::vector<TensorEntry>& entries, char* buf, CopyElements copy);
void unpack(std::vector<TensorEntry>& entries, const char* buf, CopyElements copy);

// Allgather: rank r's block holds its rows of every tensor of the group, tensor after tensor
// (elements). pack() at block `me`'s offset lays out this rank's.
void allgather_blocks(const std::vector<Response>& group, const std::vector<TensorEntry>& entries, int n,
                      std::vector<size_t>& block);
// Copies the gathered blocks (block r at `offset[r]` of `buf`) into each tensor's output,
// `output(k)`: each output holds rank 0's rows, then rank 1's, and so on.
void unpack_blocks(const std::vector<Response>& group, const std::vector<TensorEntry>& entries,
                   const std::vector<size_t>& offset, const char* buf, FunctionRef<char*(size_t k)> output,
                   CopyElements copy);
// The output of an allgather or gather of `q` whose n ranks sent `per_rank` rows: sets its
// shape and returns its bytes.
size_t gathered_output(const Request& q, const std::vector<int64_t>& per_rank, int n, AllocatedOutput& out);

// Reducescatter: segment r of the fused buffer holds, tensor after tensor, the rows rank r
// receives (elements).
void reducescatter_segments(const std::vector<TensorEntry>& entries, int n, std::vector<size_t>& segment);
// Copies every tensor's rows for rank r into segment r of `buf` (at `offset[r]`); `cursor` is scratch.
void pack_segments(const std::vector<TensorEntry>& entries, int n, const std::vector<size_t>& offset, char* buf,
                   CopyElements copy, std::vector<size_t>& cursor);
// Copies rank `me`'s rows of each tensor, one after another from `mine`, into the outputs.
void unpack_own_rows(std::vector<TensorEntry>& entries, int n, int me, const char* mine, CopyElements copy);

// Alltoall on rank `me` by the agreed n x n rows (from r to j at r * n + j): the bytes it sends
// to and receives from each rank, its output's shape and received splits; returns its bytes.
size_t alltoall_output(const Request& q, const std::vector<int64_t>& per_rank, int n, int me,
                       std::vector<size_t>& send_bytes, std::vector<size_t>& recv_bytes, AllocatedOutput& out);

// Gather: the bytes each of n ranks sends to the root, by its agreed rows.
void gatherv_bytes(const Request& q, const std::vector<int64_t>& per_rank, int n, std::vector<size_t>& bytes);
// Scatter: the bytes the root sends each of n ranks (its rows_of_rank of the root's tensor).
void scatterv_bytes(const Request& q, int n, std::vector<size_t>& bytes);

}  // namespace horo
