#include "engine/collective_shapes.h"

namespace horo {

namespace {

size_t esize_of(const std::vector<TensorEntry>& entries) { return dtype_size(entries.front().request.dtype); }

}  // namespace

void to_bytes(const std::vector<size_t>& counts, size_t esize, std::vector<size_t>& bytes) {
  bytes.resize(counts.size());
  for (size_t r = 0; r < counts.size(); ++r) bytes[r] = counts[r] * esize;
}

size_t total_elements(const std::vector<TensorEntry>& entries) {
  size_t total = 0;
  for (const auto& e : entries) total += elements(e.request.shape);
  return total;
}

void pack(const std::vector<TensorEntry>& entries, char* buf, CopyElements copy) {
  const size_t esize = esize_of(entries);
  for (const auto& e : entries) {
    const size_t count = elements(e.request.shape);
    copy(buf, static_cast<const char*>(e.input), count);
    buf += count * esize;
  }
}

void unpack(std::vector<TensorEntry>& entries, const char* buf, CopyElements copy) {
  const size_t esize = esize_of(entries);
  for (auto& e : entries) {
    const size_t count = elements(e.request.shape);
    copy(static_cast<char*>(e.output), buf, count);
    buf += count * esize;
  }
}

void allgather_blocks(const std::vector<Response>& group, const std::vector<TensorEntry>& entries, int n,
                      std::vector<size_t>& block) {
  block.assign(n, 0);
  for (size_t k = 0; k < entries.size(); ++k) {
    const size_t row = row_elements(entries[k].request.shape);
    for (int r = 0; r < n; ++r) block[r] += static_cast<size_t>(group[k].per_rank[r]) * row;
  }
}

void unpack_blocks(const std::vector<Response>& group, const std::vector<TensorEntry>& entries,
                   const std::vector<size_t>& offset, const char* buf, FunctionRef<char*(size_t k)> output,
                   CopyElements copy) {
  const size_t esize = esize_of(entries);
  std::vector<size_t> written(entries.size(), 0);
  for (size_t r = 0; r < offset.size(); ++r) {
    size_t cursor = offset[r];
    for (size_t k = 0; k < entries.size(); ++k) {
      const size_t count = static_cast<size_t>(group[k].per_rank[r]) * row_elements(entries[k].request.shape);
      copy(output(k) + written[k] * esize, buf + cursor * esize, count);
      written[k] += count;
      cursor += count;
    }
  }
}

size_t gathered_output(const Request& q, const std::vector<int64_t>& per_rank, int n, AllocatedOutput& out) {
  out.shape = q.shape;
  out.shape[0] = 0;
  for (int r = 0; r < n; ++r) out.shape[0] += per_rank[r];
  return elements(out.shape) * dtype_size(q.dtype);
}

void reducescatter_segments(const std::vector<TensorEntry>& entries, int n, std::vector<size_t>& segment) {
  segment.assign(n, 0);
  for (const auto& e : entries) {
    for (int r = 0; r < n; ++r) segment[r] += rank_elements(e.request.shape, n, r);
  }
}

void pack_segments(const std::vector<TensorEntry>& entries, int n, const std::vector<size_t>& offset, char* buf,
                   CopyElements copy, std::vector<size_t>& cursor) {
  const size_t esize = esize_of(entries);
  cursor.assign(offset.begin(), offset.end());
  for (const auto& e : entries) {
    const char* in = static_cast<const char*>(e.input);
    for (int r = 0; r < n; ++r) {
      const size_t count = rank_elements(e.request.shape, n, r);
      copy(buf + cursor[r] * esize, in, count);
      in += count * esize;
      cursor[r] += count;
    }
  }
}

void unpack_own_rows(std::vector<TensorEntry>& entries, int n, int me, const char* mine, CopyElements copy) {
  const size_t esize = esize_of(entries);
  for (auto& e : entries) {
    const size_t count = rank_elements(e.request.shape, n, me);
    copy(static_cast<char*>(e.output), mine, count);
    mine += count * esize;
  }
}

size_t alltoall_output(const Request& q, const std::vector<int64_t>& per_rank, int n, int me,
                       std::vector<size_t>& send_bytes, std::vector<size_t>& recv_bytes, AllocatedOutput& out) {
  const size_t row_bytes = row_elements(q.shape) * dtype_size(q.dtype);
  send_bytes.resize(n);
  recv_bytes.resize(n);
  out.shape = q.shape;
  out.shape[0] = 0;
  out.received_splits.resize(n);
  for (int r = 0; r < n; ++r) {
    const size_t rows_in = rows_received(per_rank, /*alltoall=*/true, n, me, r);
    send_bytes[r] = static_cast<size_t>(q.splits[r]) * row_bytes;
    recv_bytes[r] = rows_in * row_bytes;
    out.received_splits[r] = static_cast<int64_t>(rows_in);
    out.shape[0] += static_cast<int64_t>(rows_in);
  }
  return static_cast<size_t>(out.shape[0]) * row_bytes;
}

void gatherv_bytes(const Request& q, const std::vector<int64_t>& per_rank, int n, std::vector<size_t>& bytes) {
  const size_t row_bytes = row_elements(q.shape) * dtype_size(q.dtype);
  bytes.resize(n);
  for (int r = 0; r < n; ++r) bytes[r] = static_cast<size_t>(per_rank[r]) * row_bytes;
}

void scatterv_bytes(const Request& q, int n, std::vector<size_t>& bytes) {
  const size_t esize = dtype_size(q.dtype);
  bytes.resize(n);
  for (int r = 0; r < n; ++r) bytes[r] = rank_elements(q.shape, n, r) * esize;
}

}  // namespace horo
