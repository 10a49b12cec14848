// What only a shared-memory transport can do, apart from the core Transport
// interface: fused control and data steps (preloads), outputs its peers write into,
// and an idle wait that sees peers start a cycle. The engine asks a transport for it
// (Transport::shm()); MPI, NCCL and the hierarchical composition have none.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "common/copy_bytes.h"
#include "common/function_ref.h"
#include "common/types.h"
#include "wire/messages.h"

namespace horo {

// A source of output buffers its peers may write into; returns nullptr where it has no room.
using OutputAllocator = std::function<std::shared_ptr<char>(size_t bytes)>;
inline OutputAllocator no_shared_outputs() {
  return [](size_t) { return std::shared_ptr<char>(); };
}

class ShmCapabilities {
 public:
  virtual ~ShmCapabilities() = default;

  // Where this rank's peers can write into memory it allocates: a source of output
  // buffers for it. A collective into such outputs (an allgather's, alltoall's, the
  // NumPy API's new arrays) has each rank write its data straight into its peers'
  // outputs, which saves a copy. It may outlive the transport (outputs outlive it),
  // and returns nullptr where it has no room left: callers then allocate their own.
  virtual OutputAllocator output_allocator() const = 0;

  // Fused control and data. Once per cycle, before its control
  // step (allreduce_bitand), the controller hands over the input of the cached
  // collective this rank expects to run first, up to preload_capacity() bytes
  // (none: bytes 0); where the control step shows every rank did the same, each
  // rank reads its peers' inputs in place (preloaded(r)) and computes its output
  // with no step of its own: a small collective costs one rendezvous, not two.
  // A rank's input stays readable until the control step after next.
  // `rooted`: only this rank's input is read, by every peer (broadcast, scatter).
  virtual size_t preload_capacity() const = 0;
  // Bytes of this rank's input that `q`'s collective reads from its peers' preloaded inputs,
  // or -1 where it cannot run from them (it runs as negotiated); the policy's (shm/policy.h).
  virtual int64_t preload_bytes(const Request& q, int root_set_rank) const = 0;
  virtual void preload(const void* input, size_t bytes, bool rooted) = 0;
  virtual const char* preloaded(int rank) = 0;
  // A rank may still be copying its input in, kPreloadPieceBytes at a time, after the control
  // step (where the policy says so, shm/policy.h): readers wait for the pieces they read
  // (await_preloaded: until `rank`'s first `bytes` are there) or read through read_preloaded
  // (bytes [at, at + bytes) into `out`).
  static constexpr size_t kPreloadPieceBytes = 8 << 10;
  virtual void await_preloaded(int rank, size_t bytes) = 0;
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
  virtual bool preload_output(size_t bytes, const std::vector<size_t>& recv_at) = 0;
  virtual std::shared_ptr<char> take_preloaded_output() = 0;
  // Whether it moves a broadcast's or scatter's `bytes` from the root's buffer straight into the
  // receivers' (read or written directly), which beats preloading them: those are not preloaded.
  virtual bool moves_rooted_directly(CollectiveType type, size_t bytes) const = 0;
  // Idle waiting, seeing peers start a cycle: sleeps until local_work() holds, a peer has begun a
  // collective this rank has not joined, or `timeout` passes, so an idle
  // engine needs no polling period. Returns false, at once, where it cannot
  // watch its peers: the caller then sleeps its own way.
  // `spin`: spin briefly before sleeping (a peer's answer is usually microseconds away).
  virtual bool wait_for_peers(FunctionRef<bool()> local_work, std::chrono::microseconds timeout,
                              bool spin = true) = 0;
  // Ends this process's wait_for_peers() (new local work). Any thread.
  virtual void wake_local() = 0;
  // Where wait_for_peers() works: whether some peer has begun a collective
  // (a cycle) this rank has not joined yet. Never blocks.
  virtual bool watches_peers() const = 0;
  virtual bool peers_ahead() = 0;
  // A caller thread runs this rank's cycles for now (on), or has stopped (off):
  // peers need not wake this rank's idle wait_for_peers() meanwhile. A cycle a
  // peer began just before `off` may go unrung: the idle wait looks at its
  // peers at least every 100 ms, and this rank's next enqueue joins it.
  virtual void set_caller_cycles(bool on) = 0;
};

}  // namespace horo
