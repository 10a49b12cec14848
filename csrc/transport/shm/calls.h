// One collective call as the shared-memory paths take it: its buffers, and the sizes every rank
// knows. Each path's predicate decides from these alone (or from a step every rank takes), so
// every rank picks the same path.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "common/types.h"
#include "transport/shm/layout.h"

namespace horo {

// Allreduce (root: kEveryRank) or reduce to `root`.
struct ReduceCall {
  static constexpr int kEveryRank = -1;
  const char* in;
  char* out;
  size_t count;
  DataType dtype;
  ReduceOp op;
  double scale;
  int root;

  CollectiveType type() const { return root == kEveryRank ? CollectiveType::kAllreduce : CollectiveType::kReduce; }
  size_t esize() const { return dtype_size(dtype); }
  size_t bytes() const { return count * esize(); }
  // A reduce's non-roots hand their input in and get nothing back.
  bool wants_result(int rank) const { return root == kEveryRank || rank == root; }
  // Ranks this rank's reduced slice goes to: every peer, or the root.
  int targets(int size) const { return root == kEveryRank ? size - 1 : 1; }
  bool sends_to(int peer) const { return root == kEveryRank || peer == root; }
};

struct ReduceScatterCall {
  ReduceScatterCall(const void* input, void* output, const std::vector<size_t>& counts, DataType dtype, ReduceOp op)
      : in(static_cast<const char*>(input)),
        out(static_cast<char*>(output)),
        counts(counts),
        offset(prefix_offsets(counts)),
        dtype(dtype),
        op(op),
        esize(dtype_size(dtype)),
        total((offset.back() + counts.back()) * esize) {}
  const char* in;
  char* out;
  const std::vector<size_t>& counts;  // elements per rank
  const std::vector<size_t> offset;
  DataType dtype;
  ReduceOp op;
  size_t esize;
  size_t total;  // bytes of the input
};

struct AllgatherCall {
  AllgatherCall(const void* mine, void* output, const std::vector<size_t>& byte_counts)
      : mine(static_cast<const char*>(mine)),
        out(static_cast<char*>(output)),
        bytes(byte_counts),
        offset(prefix_offsets(byte_counts)),
        total(offset.back() + byte_counts.back()),
        largest(*std::max_element(byte_counts.begin(), byte_counts.end())) {}
  const char* mine;
  char* out;
  const std::vector<size_t>& bytes;
  const std::vector<size_t> offset;
  size_t total;
  size_t largest;  // the most any rank reads from one peer
};

struct GatherCall {
  GatherCall(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root)
      : mine(static_cast<const char*>(mine)),
        out(static_cast<char*>(output)),
        bytes(byte_counts),
        offset(prefix_offsets(byte_counts)),
        total(offset.back() + byte_counts.back()),
        root(root) {}
  const char* mine;
  char* out;  // the root's; the others' are empty
  const std::vector<size_t>& bytes;
  const std::vector<size_t> offset;
  size_t total;
  int root;
};

struct ScatterCall {
  ScatterCall(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root)
      : in(static_cast<const char*>(input)),
        mine(static_cast<char*>(mine)),
        bytes(byte_counts),
        offset(prefix_offsets(byte_counts)),
        total(offset.back() + byte_counts.back()),
        root(root) {}
  const char* in;  // the root's
  char* mine;
  const std::vector<size_t>& bytes;
  const std::vector<size_t> offset;
  size_t total;
  int root;
};

// Only a pair's two ends know its size (send_bytes[r] here is recv_bytes[this rank] on r).
struct AlltoallCall {
  AlltoallCall(const void* input, const std::vector<size_t>& send_bytes, void* output,
               const std::vector<size_t>& recv_bytes)
      : in(static_cast<const char*>(input)),
        out(static_cast<char*>(output)),
        send_bytes(send_bytes),
        recv_bytes(recv_bytes),
        send_at(prefix_offsets(send_bytes)),
        recv_at(prefix_offsets(recv_bytes)) {}
  const char* in;
  char* out;
  const std::vector<size_t>& send_bytes;
  const std::vector<size_t>& recv_bytes;
  const std::vector<size_t> send_at;
  const std::vector<size_t> recv_at;
};

struct BroadcastCall {
  char* buf;
  size_t bytes;
  int root;
};

}  // namespace horo
