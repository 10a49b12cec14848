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

namespace horo {

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Its own collectives beat the ring over its point-to-point at every size
  // (shared memory), so "auto" algorithms use them.
  virtual bool prefers_native() const { return false; }
  // Prefix of the timeline's names for its native collectives (MPI_ALLREDUCE, SHM_ALLREDUCE).
  virtual const char* name() const { return "MPI"; }

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

  // Where this rank's peers can write into memory it allocates (shared memory):
  // a source of output buffers for it. A collective into such outputs (an
  // allgather's, alltoall's, the NumPy API's new arrays) has each rank write its
  // data straight into its peers' outputs, which saves a copy. It may outlive the
  // transport (outputs outlive it), and returns nullptr where it has no room left
  // or the transport has none: callers then allocate their own.
  using OutputAllocator = std::function<std::shared_ptr<char>(size_t bytes)>;
  static OutputAllocator no_shared_outputs() {
    return [](size_t) { return std::shared_ptr<char>(); };
  }
  virtual OutputAllocator output_allocator() const { return no_shared_outputs(); }

  // Fused control and data (shared memory). Once per cycle, before its control
  // step (allreduce_bitand), the controller hands over the input of the cached
  // collective this rank expects to run first, up to preload_capacity() bytes
  // (none: bytes 0); where the control step shows every rank did the same, each
  // rank reads its peers' inputs in place (preloaded(r)) and computes its output
  // with no step of its own: a small collective costs one rendezvous, not two.
  // A rank's input stays readable until the control step after next.
  // `rooted`: only this rank's input is read, by every peer (broadcast, scatter).
  virtual size_t preload_capacity() const { return 0; }
  virtual void preload(const void* /*input*/, size_t /*bytes*/, bool /*rooted*/) {}
  virtual const char* preloaded(int /*rank*/) { return nullptr; }
  // A rank may still be copying its input in, kPreloadPieceBytes at a time, after the control
  // step: readers wait for the pieces they read (await_preloaded: until `rank`'s first `bytes`
  // are there) or read through read_preloaded (bytes [at, at + bytes) into `out`).
  static constexpr size_t kPreloadPieceBytes = 8 << 10;
  virtual bool preloads_in_pieces() const { return false; }
  virtual void await_preloaded(int /*rank*/, size_t /*bytes*/) {}
  void read_preloaded(int rank, size_t at, void* out, size_t bytes) {
    char* to = static_cast<char*>(out);
    for (size_t from = at, end = at + bytes; from < end;) {
      const size_t upto = std::min(end, (from / kPreloadPieceBytes + 1) * kPreloadPieceBytes);
      await_preloaded(rank, upto);
      copy_bytes(to + (from - at), preloaded(rank) + from, upto - from);
      from = upto;
    }
  }
  // An exchange too large to preload (allgather, alltoall) sends its output's location with the
  // control step instead: after preload(), the controller has the transport lay out `bytes` its
  // peers may write into (preload_output; `recv_at`: where each rank's rows for this one begin).
  // Where every rank did, the executor takes that memory (take_preloaded_output, else null) and
  // the exchange writes into its peers' outputs without first asking where they are.
  virtual bool preload_output(size_t /*bytes*/, const std::vector<size_t>& /*recv_at*/) { return false; }
  virtual std::shared_ptr<char> take_preloaded_output() { return nullptr; }
  // Whether it moves a broadcast's or scatter's `bytes` from the root's buffer straight into the
  // receivers' (read or written directly), which beats preloading them: those are not preloaded.
  virtual bool moves_rooted_directly(CollectiveType /*type*/, size_t /*bytes*/) const { return false; }

  // Control plane, used by the controller once per cycle.
  // Bitwise AND of `words` across ranks, in place. Waits politely: the other
  // ranks may be busy computing, and a spinning wait would steal their core.
  virtual void allreduce_bitand(std::vector<uint64_t>& words) = 0;
  // Root receives every rank's bytes (index = rank); others get an empty vector.
  virtual std::vector<std::string> gather_bytes(const std::string& mine, int root) = 0;
  virtual void broadcast_bytes(std::string& data, int root) = 0;

  // Idle waiting, where the transport can see its peers start a cycle
  // (shared memory): sleeps until local_work() holds, a peer has begun a
  // collective this rank has not joined, or `timeout` passes, so an idle
  // engine needs no polling period. Returns false, at once, where it cannot
  // watch its peers: the caller then sleeps its own way.
  // `spin`: spin briefly before sleeping (a peer's answer is usually microseconds away).
  virtual bool wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout,
                              bool spin = true) {
    return false;
  }
  // Ends this process's wait_for_peers() (new local work). Any thread.
  virtual void wake_local() {}
  // Where wait_for_peers() works: whether some peer has begun a collective
  // (a cycle) this rank has not joined yet. Never blocks.
  virtual bool watches_peers() const { return false; }
  virtual bool peers_ahead() { return false; }
  // A caller thread runs this rank's cycles for now (on), or has stopped (off):
  // peers need not wake this rank's idle wait_for_peers() meanwhile. A cycle a
  // peer began just before `off` may go unrung: the idle wait looks at its
  // peers at least every 100 ms, and this rank's next enqueue joins it.
  virtual void set_caller_cycles(bool /*on*/) {}
};

}  // namespace horo
