// The shared-memory transport's policy, in one place: every size at which it changes data
// path, and which cached collectives ride the control step. Each threshold is the user's
// HORO_SHM_* setting where one is set, else this policy's choice for the machine: ranks on
// the host against its cores, plus what the transport probes at start (store_probe.h,
// cross_memory.h). The measurements behind each choice are in benchmarks/MEASUREMENTS.md,
// "Shared-memory thresholds".
#pragma once

#include <cstdint>

#include "common/tunables.h"
#include "wire/messages.h"

namespace horo {

struct ShmThresholds {
  static constexpr uint64_t kProbe = ~uint64_t(0);  // stream_bytes: measured at start (store_probe.h)

  // Control step: cached collectives of at most small_bytes of input ride it; between 2 ranks
  // with cores of their own, reductions and gathers up to preload_bytes too, read in pieces.
  uint64_t small_bytes = 16384;
  uint64_t preload_bytes = 0;
  // Copies into a slot from this size use non-temporal stores (0: never).
  uint64_t stream_bytes = 0;
  // From these sizes a collective reads (or writes) its peers' buffers directly, one copy
  // instead of two through the segment (0: never):
  uint64_t single_copy_bytes = 0;                // gather and scatter
  uint64_t broadcast_single_copy_bytes = 0;      // broadcast's readers
  uint64_t rooted_share_bytes = 0;               // gather / scatter through the heaps, the idle side reading a share
  uint64_t exchange_single_copy_bytes = 0;       // allgather, alltoall
  uint64_t reduce_single_copy_bytes = 0;         // allreduce
  uint64_t rooted_reduce_single_copy_bytes = 0;  // reduce to a root
  uint64_t reducescatter_single_copy_bytes = 0;
  // An allreduce from this size pushes each slice to its reducer before the round's last step (0: never).
  uint64_t allreduce_push_bytes = 0;

  // Whether any path reads or writes peers' memory directly (then cross_memory_works() is asked).
  bool reads_directly() const {
    return single_copy_bytes || broadcast_single_copy_bytes || rooted_share_bytes || exchange_single_copy_bytes ||
           reduce_single_copy_bytes || rooted_reduce_single_copy_bytes || reducescatter_single_copy_bytes;
  }
};

// The thresholds for a host running `ranks_on_host` ranks on `cores` cores.
ShmThresholds choose_shm_thresholds(const Tunables& tunables, int ranks_on_host, unsigned cores);

// Bytes of this rank's input that `q`'s collective reads from its peers' preloaded inputs, or
// -1 where it cannot run from them (it runs as negotiated). `pairs_in_pieces`: a set of 2 ranks
// whose transport preloads in pieces (ShmCapabilities::preloads_in_pieces).
int64_t preload_bytes(const ShmThresholds& thresholds, const Tunables& tunables, const Request& q, int set_rank,
                      int root_set_rank, bool pairs_in_pieces);

}  // namespace horo
