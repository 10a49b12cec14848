// The shared-memory transport's policy, in one place: every size at which it changes data
// path (and, within a path, its stores and who copies what), which path each collective takes,
// and which cached collectives ride the control step. Each threshold is the user's
// HORO_SHM_* setting where one is set, else this policy's choice for the machine: ranks on
// the host against its cores, plus what the transport probes at start (store_probe.h,
// cross_memory.h). The measurements behind each choice are in benchmarks/MEASUREMENTS.md,
// "Shared-memory thresholds".
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/tunables.h"
#include "common/types.h"
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

  // The same on every machine (no setting; MEASUREMENTS.md, "Shared-memory data paths"):
  // A gather or scatter from this size writes straight into outputs that lie in the heaps; a
  // smaller one takes one step through the segment rather than two.
  uint64_t rooted_push_bytes = 65536;
  // A broadcast's readers, or the idle side of a rooted move in the heaps, read the root's memory
  // directly only where at most this many ranks take part: many readers pinning the same pages of
  // the root's lose to its one copy in.
  uint64_t most_ranks_reading_one_root = 4;
  // A broadcast's reader that finds the root's lines in its own cache (cached_reads.h) reads the
  // whole buffer itself up to this size; beyond it the root's share of the copying wins even so.
  uint64_t broadcast_read_whole_bytes = 131072;
  // Where stream_bytes is kProbe and the probe finds streamed stores faster, copies into a slot
  // stream from this size: below it a copy is a few lines, which a plain store fetches quickly enough.
  uint64_t probed_stream_bytes = 16384;
  // Stores of more than an L2 cache's worth in one call only evict their own lines: a rank's own
  // part of an exchange streams from this size, and so do a call's pushes into its peers' outputs
  // where stream_bytes is kProbe and at least stream_pushes_cores ranks store at once (a plain
  // store fetches its line first: twice the memory traffic).
  uint64_t own_stream_bytes = 2097152;
  uint64_t stream_pushes_cores = 8;

  // Whether any path reads or writes peers' memory directly (then cross_memory_works() is asked).
  bool reads_directly() const {
    return single_copy_bytes || broadcast_single_copy_bytes || rooted_share_bytes || exchange_single_copy_bytes ||
           reduce_single_copy_bytes || rooted_reduce_single_copy_bytes || reducescatter_single_copy_bytes;
  }
};

// The thresholds for a host running `ranks_on_host` ranks on `cores` cores.
ShmThresholds choose_shm_thresholds(const Tunables& tunables, int ranks_on_host, unsigned cores);

// Whether a move of `bytes` reads or writes peers' buffers directly, from `threshold` (0: never);
// never where the kernel refuses cross-memory access.
inline bool moves_directly(uint64_t threshold, size_t bytes, bool cross_memory) {
  return cross_memory && threshold > 0 && bytes >= threshold;
}

// The data paths of the shared-memory transport (shm_transport.h), one class each in shm/.
enum class ShmPath : uint8_t { kOneStepReduce, kReduceReadingPeers, kHeapPush, kDirectRead, kSegmentPipeline };
const char* shm_path_name(ShmPath path);

// The paths a collective asks, in order; it runs the first eligible one, and the last always is.
// ShmTransport asks its paths in this order (a static_assert there keeps it so).
struct ShmPathOrder {
  ShmPath paths[3];
  int count;
};
constexpr ShmPathOrder shm_path_order(CollectiveType type) {
  switch (type) {
    case CollectiveType::kAllreduce:
    case CollectiveType::kReduce:
      return {{ShmPath::kOneStepReduce, ShmPath::kReduceReadingPeers, ShmPath::kSegmentPipeline}, 3};
    case CollectiveType::kReducescatter: return {{ShmPath::kReduceReadingPeers, ShmPath::kSegmentPipeline}, 2};
    case CollectiveType::kAllgather:
    case CollectiveType::kGather:
    case CollectiveType::kScatter: return {{ShmPath::kHeapPush, ShmPath::kDirectRead, ShmPath::kSegmentPipeline}, 3};
    case CollectiveType::kAlltoall: return {{ShmPath::kHeapPush, ShmPath::kSegmentPipeline}, 2};
    case CollectiveType::kBroadcast: return {{ShmPath::kDirectRead, ShmPath::kSegmentPipeline}, 2};
    default: return {{ShmPath::kSegmentPipeline}, 1};
  }
}

// What a path's eligibility depends on besides the call's size and the ranks taking part: facts
// of this run that every rank shares.
struct PathConditions {
  size_t half_slot_bytes = 0;  // what one half of a slot holds (ShmContext::chunk)
  bool heap = false;           // outputs horo allocates lie in heaps the peers map
  bool cross_memory = false;   // the ranks may read and write each other's memory (cross_memory.h)
  // Every rank's output lies in its heap. Known only from a step (HeapPush takes it where the rest
  // of its conditions hold) or from this cycle's control step.
  bool outputs_located = false;
};

// Whether `path` may run a `type` collective of `bytes` among `ranks` ranks. `bytes` is a size
// every rank knows: an allreduce's, reduce's or broadcast's buffer, a reducescatter's input, a
// gather's or scatter's total, an allgather's largest part (the most any rank reads from one
// peer); an alltoall decides on no size (its pairs' are known only at their two ends).
bool shm_path_eligible(ShmPath path, const ShmThresholds& thresholds, CollectiveType type, size_t bytes, int ranks,
                       const PathConditions& conditions);
// The first eligible path of shm_path_order(type): the path the collective takes.
ShmPath choose_shm_path(const ShmThresholds& thresholds, CollectiveType type, size_t bytes, int ranks,
                        const PathConditions& conditions);

// Whether a broadcast or scatter of `bytes` may move the root's buffer in one copy (read
// directly, or written into outputs in the heaps, wherever they turn out to lie): then a preload,
// which costs two, does not pay.
bool moves_rooted_directly(const ShmThresholds& thresholds, CollectiveType type, size_t bytes, int ranks,
                           const PathConditions& conditions);
// Whether a gather or scatter into the heaps has the side that would wait (a gather's root, a
// scatter's receivers) read a share of the rows directly meanwhile.
bool shares_rooted_move(const ShmThresholds& thresholds, size_t bytes, int ranks, bool cross_memory);
// Bytes of a call's pushes into peers' outputs from which they stream whatever the slot copies
// do, for `ranks` ranks on `cores` cores (0: as the slot copies do).
size_t push_stream_bytes(const ShmThresholds& thresholds, int ranks, unsigned cores);

// Whether a preload larger than a piece is copied in a piece at a time after the control step
// (ControlPlane::preload); `oversubscribed`: ranks outnumber cores, so spinning yields
// (ShmContext::spin_yields).
bool preloads_in_pieces(bool oversubscribed);

// Bytes of this rank's input that `q`'s collective reads from its peers' preloaded inputs, or
// -1 where it cannot run from them (it runs as negotiated), in a set of `ranks` ranks
// (`oversubscribed`: as for preloads_in_pieces).
int64_t preload_bytes(const ShmThresholds& thresholds, const Tunables& tunables, const Request& q, int set_rank,
                      int root_set_rank, int ranks, bool oversubscribed);

}  // namespace horo
