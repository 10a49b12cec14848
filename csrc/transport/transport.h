// What an algorithm may ask of the wire. Algorithms (collectives/) and the
// engine's point-to-point see only this interface; MPI, shared memory, the
// hierarchical composition and NCCL implement it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/copy_bytes.h"
#include "common/function_ref.h"
#include "common/types.h"
#include "reduce/reduce_kernels.h"
#include "transport/shm_capabilities.h"

namespace horo {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Its own collectives beat the ring over its point-to-point at every size
  // (shared memory), so "auto" algorithms use them.
  virtual bool prefers_native() const { return false; }

  // Data plane: non-blocking point-to-point. Messages between one pair of
  // ranks arrive in the order they were posted. Each call returns a slot
  // that wait() completes; wait_all() completes every outstanding slot.
  virtual int isend(const void* buf, size_t bytes, int peer) = 0;
  virtual int irecv(void* buf, size_t bytes, int peer) = 0;
  virtual void wait(int slot) = 0;
  virtual void wait_all() = 0;

  // User point-to-point (horo.send / recv, pipeline stages): tagged, on traffic of its own
  // apart from the collectives', so any thread may post while collectives run. Messages
  // between a pair with the same tag match in the order they were posted, as in MPI.
  // The caller serialises these calls (engine/point_to_point.h holds one lock for them).
  // post_* start a transfer and return its id; test_posted() is true once it is done (the id
  // is then free), setting a receive's `received` to the bytes that came, and throws
  // horo::Error for a message larger than the receive buffer.
  virtual int post_send(const void* buf, size_t bytes, int peer, int tag) = 0;
  virtual int post_recv(void* buf, size_t bytes, int peer, int tag) = 0;
  virtual bool test_posted(int id, size_t* received) = 0;
  // The largest tag post_*() accept.
  virtual int max_tag() const = 0;

  // Whether native_allreduce / native_allgatherv of `bytes` run a two-level
  // (intra-host, then cross-host) algorithm that beats the executor's flat
  // ring; the executor then calls them instead of the ring.
  virtual bool two_level_allreduce(size_t /*bytes*/) const { return false; }
  virtual bool two_level_allgather(size_t /*bytes*/) const { return false; }

  // The transport's own all-reduce (output may equal input). Returns false
  // when it cannot reduce this dtype/op correctly (the caller uses the ring).
  virtual bool native_allreduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op) = 0;
  // The same, times `scale` (an Average's 1/n). A transport that can scale each element in its
  // own pass over the data overrides it; a pass of its own over a large output costs 10-40%.
  virtual bool native_allreduce_scaled(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                                       double scale) {
    if (!native_allreduce(input, output, count, dtype, op)) return false;
    scale_buffer(dtype, output, count, scale);
    return true;
  }
  // Reduce-scatter: rank r receives counts[r] elements (false if unsupported).
  virtual bool native_reduce_scatter(const void* input, void* output, const std::vector<size_t>& counts,
                                     DataType dtype, ReduceOp op) = 0;
  // Concatenates every rank's bytes (byte_counts[r] from rank r) into output.
  virtual void native_allgatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts) = 0;
  // send_bytes[r] bytes go to rank r, recv_bytes[r] come from it, each packed in rank order.
  virtual void alltoallv(const void* input, const std::vector<size_t>& send_bytes, void* output,
                         const std::vector<size_t>& recv_bytes) = 0;
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // Root receives byte_counts[r] bytes from each rank r, concatenated in rank order.
  virtual void gatherv(const void* mine, void* output, const std::vector<size_t>& byte_counts, int root) = 0;
  // Root sends byte_counts[r] bytes of its input, in rank order, to each rank r.
  virtual void scatterv(const void* input, const std::vector<size_t>& byte_counts, void* mine, int root) = 0;
  // Reduction delivered to root only (false if unsupported).
  virtual bool native_reduce(const void* input, void* output, size_t count, DataType dtype, ReduceOp op,
                             int root) = 0;
  virtual void barrier() = 0;
  // Collective over this transport: a transport over `members` (ranks of
  // this one, ascending) for members, nullptr for everyone else.
  virtual std::unique_ptr<Transport> split(const std::vector<int>& members) = 0;

  // Control plane, used by the controller once per cycle.
  // Bitwise AND of `words` across ranks, in place. Waits politely: the other
  // ranks may be busy computing, and a spinning wait would steal their core.
  virtual void allreduce_bitand(std::vector<uint64_t>& words) = 0;
  // Root receives every rank's bytes (index = rank); others get an empty vector.
  virtual std::vector<std::string> gather_bytes(const std::string& mine, int root) = 0;
  virtual void broadcast_bytes(std::string& data, int root) = 0;

  // What only shared memory can do (fused control and data steps, outputs peers write
  // into, watching peers start cycles); nullptr for every other transport.
  virtual ShmCapabilities* shm() { return nullptr; }
};

}  // namespace horo
