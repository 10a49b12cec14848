#include "transport/shm/policy.h"

#include <algorithm>

#include "common/types.h"

namespace horo {

namespace {

uint64_t chosen(int64_t setting, uint64_t policy) { return setting >= 0 ? static_cast<uint64_t>(setting) : policy; }

// Between 2 ranks with cores of their own, an exchange (allgather, alltoall) rides the control
// step only while its output is at most this: beyond it the copies cost more than the step saved.
constexpr int64_t kPairExchangePreloadOutput = 4096;

// The most input bytes an exchange whose output is `outputs_per_input` times its rank's input preloads.
int64_t exchange_preload_limit(const ShmThresholds& th, bool pairs_in_pieces, int64_t outputs_per_input) {
  const int64_t small = static_cast<int64_t>(th.small_bytes);
  return pairs_in_pieces ? std::min(small, kPairExchangePreloadOutput / outputs_per_input) : small;
}

}  // namespace

ShmThresholds choose_shm_thresholds(const Tunables& t, int ranks_on_host, unsigned cores) {
  // Where ranks outnumber cores, a rank that reads directly waits for peers that need its
  // core, and the last rank to run makes everyone wait: there the direct paths start later.
  const bool oversubscribed = static_cast<unsigned>(ranks_on_host) > cores;
  ShmThresholds th;
  th.small_bytes = static_cast<uint64_t>(t.shm_small_bytes);
  th.preload_bytes = static_cast<uint64_t>(t.shm_preload_bytes);
  th.stream_bytes = t.shm_stream_bytes < 0 ? ShmThresholds::kProbe : static_cast<uint64_t>(t.shm_stream_bytes);
  // Read directly, every rank copies each peer's data once instead of in and out of the segment.
  th.exchange_single_copy_bytes = chosen(t.shm_exchange_single_copy_bytes, oversubscribed ? 4194304 : 1048576);
  if (t.shm_single_copy_bytes < 0) {
    // A broadcast's root writes the last 1/size of each reader's buffer itself, so reading
    // directly pays early between 2 ranks; gather and scatter read directly only when large.
    th.single_copy_bytes = 16777216;
    th.broadcast_single_copy_bytes = oversubscribed ? 16777216 : ranks_on_host == 2 ? 16384 : 65536;
    th.rooted_share_bytes = oversubscribed ? 1048576 : 524288;
  } else {  // one variable sets all three
    th.single_copy_bytes = th.broadcast_single_copy_bytes = th.rooted_share_bytes =
        static_cast<uint64_t>(t.shm_single_copy_bytes);
  }
  // Pushes come before the round's last step, the copies out they save after it: they pay only
  // where ranks share cores (the last rank to run otherwise makes everyone wait longer).
  th.allreduce_push_bytes = chosen(t.shm_allreduce_push_bytes, oversubscribed ? 1048576 : 0);
  if (t.shm_reduce_single_copy_bytes < 0) {
    // Each rank reads a slice of bytes/size from every peer in one system call each: worth it
    // from a slice of 128 KiB. A rooted reduce's senders must then wait for their peers' reads
    // instead of leaving once their slice is in the segment, which costs more where ranks share cores.
    const uint64_t direct = std::max<uint64_t>(524288, uint64_t(ranks_on_host) * 131072);
    th.reduce_single_copy_bytes = oversubscribed ? 1048576 : direct;
    th.rooted_reduce_single_copy_bytes = oversubscribed ? 16777216 : direct;
    // Through the segment a reducescatter takes one step and one copy a chunk where an allreduce
    // takes two and three: reading directly wins later.
    th.reducescatter_single_copy_bytes = 4194304;
  } else {  // one variable sets all three
    th.reduce_single_copy_bytes = th.rooted_reduce_single_copy_bytes = th.reducescatter_single_copy_bytes =
        static_cast<uint64_t>(t.shm_reduce_single_copy_bytes);
  }
  return th;
}

bool preloads_in_pieces(bool oversubscribed) {
  // Where ranks outnumber cores, readers waiting on pieces would take the core the writer copies on.
  return !oversubscribed;
}

int64_t preload_bytes(const ShmThresholds& th, const Tunables& t, const Request& q, int set_rank, int root_set_rank,
                      int ranks, bool oversubscribed) {
  if (q.memory != Memory::kHost) return -1;
  // A pair whose preloads come in pieces reads them as they arrive: its limits differ.
  const bool pairs_in_pieces = ranks == 2 && preloads_in_pieces(oversubscribed);
  const int64_t bytes = q.num_elements() * static_cast<int64_t>(dtype_size(q.dtype));
  const bool reduces_as_is = q.prescale == 1.0 && q.op != ReduceOp::kAdasum;
  const int64_t small = static_cast<int64_t>(th.small_bytes);
  // Reductions that read peers' inputs in pieces, as they come in, pay up to preload_bytes.
  const int64_t piecewise = pairs_in_pieces ? static_cast<int64_t>(th.preload_bytes) : small;
  switch (q.type) {
    // Above the one-step size, the transport's reduce-scatter shares the reduction out among the
    // ranks (faster) and sums in another order. Reductions from preloads go in rank order, as the
    // one-step allreduce's do.
    case CollectiveType::kAllreduce:
      return reduces_as_is && t.allreduce_algo != "ring" && bytes <= small ? bytes : -1;
    case CollectiveType::kReducescatter: return reduces_as_is && t.reducescatter_algo != "ring" ? bytes : -1;
    // Only the root reduces, from every rank's input; the others are done once the step is.
    case CollectiveType::kReduce: return reduces_as_is && bytes <= piecewise ? bytes : -1;
    // Larger exchanges write straight into their peers' outputs (heap.h) instead: preloaded,
    // each rank would copy everything twice.
    case CollectiveType::kAllgather:
      return t.allgather_algo != "ring" && bytes <= exchange_preload_limit(th, pairs_in_pieces, 2) ? bytes : -1;
    case CollectiveType::kAlltoall: return bytes <= exchange_preload_limit(th, pairs_in_pieces, 1) ? bytes : -1;
    // Only the senders' inputs: the root reads each one's rows from its area; the senders are
    // done once the step is.
    case CollectiveType::kGather:
      if (set_rank == root_set_rank) return 0;
      return bytes <= piecewise ? bytes : -1;
    // Only the root's input: every rank reads its own rows of it (scatter) or all of it.
    case CollectiveType::kBroadcast:
    case CollectiveType::kScatter: return set_rank == root_set_rank ? bytes : 0;
    default: return -1;
  }
}

const char* shm_path_name(ShmPath path) {
  switch (path) {
    case ShmPath::kOneStepReduce: return "OneStepReduce";
    case ShmPath::kReduceReadingPeers: return "ReduceReadingPeers";
    case ShmPath::kHeapPush: return "HeapPush";
    case ShmPath::kDirectRead: return "DirectRead";
    case ShmPath::kSegmentPipeline: return "SegmentPipeline";
  }
  return "?";
}

bool shm_path_eligible(ShmPath path, const ShmThresholds& th, CollectiveType type, size_t bytes, int ranks,
                       const PathConditions& c) {
  const bool reduction = type == CollectiveType::kAllreduce || type == CollectiveType::kReduce;
  switch (path) {
    // Every rank's whole input must fit in its half-slot.
    case ShmPath::kOneStepReduce: return reduction && bytes <= std::min<uint64_t>(th.small_bytes, c.half_slot_bytes);
    // Each rank reads a slice of bytes/size from every peer in one system call each; a reduce's
    // senders then wait for the reads, hence its own size.
    case ShmPath::kReduceReadingPeers:
      if (reduction) {
        const uint64_t from = type == CollectiveType::kAllreduce ? th.reduce_single_copy_bytes
                                                                  : th.rooted_reduce_single_copy_bytes;
        return moves_directly(from, bytes, c.cross_memory);
      }
      return type == CollectiveType::kReducescatter && ranks > 1 &&
             moves_directly(th.reducescatter_single_copy_bytes, bytes, c.cross_memory);
    case ShmPath::kHeapPush:
      switch (type) {
        case CollectiveType::kAllgather:
        case CollectiveType::kAlltoall: return c.heap && c.outputs_located;
        case CollectiveType::kGather:
        case CollectiveType::kScatter: return c.heap && bytes >= th.rooted_push_bytes && c.outputs_located;
        default: return false;
      }
    // Through the segment, an exchange copies each part in and out; a gather's or scatter's root
    // copies in while the receivers copy out.
    case ShmPath::kDirectRead:
      switch (type) {
        case CollectiveType::kAllgather: return moves_directly(th.exchange_single_copy_bytes, bytes, c.cross_memory);
        case CollectiveType::kGather:
        case CollectiveType::kScatter: return moves_directly(th.single_copy_bytes, bytes, c.cross_memory);
        case CollectiveType::kBroadcast:
          return moves_directly(th.broadcast_single_copy_bytes, bytes, c.cross_memory) &&
                 static_cast<uint64_t>(ranks) <= th.most_ranks_reading_one_root;
        default: return false;
      }
    case ShmPath::kSegmentPipeline: return true;
  }
  return false;
}

ShmPath choose_shm_path(const ShmThresholds& th, CollectiveType type, size_t bytes, int ranks,
                        const PathConditions& c) {
  const ShmPathOrder order = shm_path_order(type);
  for (int i = 0; i + 1 < order.count; ++i) {
    if (shm_path_eligible(order.paths[i], th, type, bytes, ranks, c)) return order.paths[i];
  }
  return order.paths[order.count - 1];
}

bool moves_rooted_directly(const ShmThresholds& th, CollectiveType type, size_t bytes, int ranks,
                           const PathConditions& c) {
  if (type != CollectiveType::kBroadcast && type != CollectiveType::kScatter) return false;
  PathConditions anywhere = c;
  anywhere.outputs_located = true;  // asked only by the collective's own step
  return choose_shm_path(th, type, bytes, ranks, anywhere) != ShmPath::kSegmentPipeline;
}

bool shares_rooted_move(const ShmThresholds& th, size_t bytes, int ranks, bool cross_memory) {
  return moves_directly(th.rooted_share_bytes, bytes, cross_memory) &&
         static_cast<uint64_t>(ranks) <= th.most_ranks_reading_one_root;
}

size_t push_stream_bytes(const ShmThresholds& th, int ranks, unsigned cores) {
  // Only where the probe chooses the stores: a given HORO_SHM_STREAM_BYTES decides pushes too.
  const unsigned storing = std::min<unsigned>(static_cast<unsigned>(ranks), std::max(1u, cores));
  return th.stream_bytes == ShmThresholds::kProbe && storing >= th.stream_pushes_cores ? th.own_stream_bytes : 0;
}

}  // namespace horo
