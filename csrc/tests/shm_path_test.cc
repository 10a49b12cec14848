// Which data path the shared-memory transport takes, as a table: (collective, bytes, ranks on the
// host, cores, conditions) -> path, each cutover from both sides, for 2 ranks with cores of their
// own, 4 ranks on 2 cores and 8 on 16. The paths' eligible() ask shm_path_eligible, and
// ShmTransport asks them in shm_path_order (a static_assert there), so this is what runs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "tests/shm_policy_defaults.h"
#include "transport/shm/policy.h"

namespace horo {
namespace {

using T = CollectiveType;
using P = ShmPath;

// What the run offers besides sizes.
enum Where {
  kLocated,        // outputs horo allocated: every rank's lies in its heap
  kElsewhere,      // the caller's arrays, outside the heaps
  kNoCrossMemory,  // the kernel refuses process_vm_readv (Yama, seccomp); outputs elsewhere
  kNoHeap,         // HORO_SHM_HEAP_BYTES=0: nothing is located
  kSmallSlots      // HORO_SHM_CHUNK_BYTES=8192; outputs elsewhere
};

PathConditions conditions(Where where) {
  PathConditions c;
  c.half_slot_bytes = where == kSmallSlots ? 8 * KiB : 1 * MiB;
  c.heap = where != kNoHeap;
  c.cross_memory = where != kNoCrossMemory;
  c.outputs_located = where == kLocated;
  return c;
}

const char* where_name(Where where) {
  switch (where) {
    case kLocated: return "outputs in the heaps";
    case kElsewhere: return "outputs elsewhere";
    case kNoCrossMemory: return "no cross-memory access";
    case kNoHeap: return "no heaps";
    case kSmallSlots: return "8 KiB slots";
  }
  return "?";
}

struct Row {
  T type;
  uint64_t bytes;
  int ranks;
  unsigned cores;
  Where where;
  P expected;
};

std::string describe(const Row& r) {
  return std::string(collective_name(r.type)) + " of " + std::to_string(r.bytes) + " bytes, " +
         std::to_string(r.ranks) + " ranks on " + std::to_string(r.cores) + " cores, " + where_name(r.where);
}

TEST(ShmPathChoice, EveryCollectiveOnBothSidesOfEveryCutover) {
  const Row rows[] = {
      // allreduce: one step up to small_bytes (as far as a half-slot holds), reading peers from
      // reduce_single_copy_bytes (512 KiB for 2 ranks, 1 MiB for 8 or where ranks share cores).
      {T::kAllreduce, 16 * KiB, 2, 2, kElsewhere, P::kOneStepReduce},
      {T::kAllreduce, 16 * KiB + 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAllreduce, 8 * KiB, 2, 2, kSmallSlots, P::kOneStepReduce},
      {T::kAllreduce, 8 * KiB + 1, 2, 2, kSmallSlots, P::kSegmentPipeline},
      {T::kAllreduce, 512 * KiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAllreduce, 512 * KiB, 2, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kAllreduce, 512 * KiB, 2, 2, kLocated, P::kReduceReadingPeers},
      {T::kAllreduce, 64 * MiB, 2, 2, kNoCrossMemory, P::kSegmentPipeline},
      {T::kAllreduce, 16 * KiB, 4, 2, kElsewhere, P::kOneStepReduce},
      {T::kAllreduce, 1 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAllreduce, 1 * MiB, 4, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kAllreduce, 16 * KiB, 8, 16, kElsewhere, P::kOneStepReduce},
      {T::kAllreduce, 1 * MiB - 1, 8, 16, kElsewhere, P::kSegmentPipeline},
      {T::kAllreduce, 1 * MiB, 8, 16, kElsewhere, P::kReduceReadingPeers},
      // reduce: the same, but from rooted_reduce_single_copy_bytes (16 MiB where ranks share cores).
      {T::kReduce, 16 * KiB, 2, 2, kElsewhere, P::kOneStepReduce},
      {T::kReduce, 16 * KiB + 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kReduce, 512 * KiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kReduce, 512 * KiB, 2, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kReduce, 16 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kReduce, 16 * MiB, 4, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kReduce, 1 * MiB - 1, 8, 16, kElsewhere, P::kSegmentPipeline},
      {T::kReduce, 1 * MiB, 8, 16, kElsewhere, P::kReduceReadingPeers},
      {T::kReduce, 64 * MiB, 8, 16, kNoCrossMemory, P::kSegmentPipeline},
      // reducescatter: reading peers from 4 MiB of input, given peers to read.
      {T::kReducescatter, 4 * MiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kReducescatter, 4 * MiB, 2, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kReducescatter, 4 * MiB, 2, 2, kNoCrossMemory, P::kSegmentPipeline},
      {T::kReducescatter, 4 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kReducescatter, 4 * MiB, 4, 2, kElsewhere, P::kReduceReadingPeers},
      {T::kReducescatter, 4 * MiB - 1, 8, 16, kElsewhere, P::kSegmentPipeline},
      {T::kReducescatter, 4 * MiB, 8, 16, kElsewhere, P::kReduceReadingPeers},
      {T::kReducescatter, 4 * MiB, 1, 2, kElsewhere, P::kSegmentPipeline},  // no peer to read
      // allgather (bytes: the largest part): pushes into located outputs at any size, else reads
      // directly from exchange_single_copy_bytes (4 MiB where ranks share cores).
      {T::kAllgather, 64, 2, 2, kLocated, P::kHeapPush},
      {T::kAllgather, 64 * MiB, 2, 2, kLocated, P::kHeapPush},
      {T::kAllgather, 1 * MiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAllgather, 1 * MiB, 2, 2, kElsewhere, P::kDirectRead},
      {T::kAllgather, 1 * MiB, 2, 2, kNoHeap, P::kDirectRead},
      {T::kAllgather, 1 * MiB, 2, 2, kNoCrossMemory, P::kSegmentPipeline},
      {T::kAllgather, 64, 4, 2, kLocated, P::kHeapPush},
      {T::kAllgather, 4 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAllgather, 4 * MiB, 4, 2, kElsewhere, P::kDirectRead},
      {T::kAllgather, 64, 8, 16, kLocated, P::kHeapPush},
      {T::kAllgather, 1 * MiB - 1, 8, 16, kElsewhere, P::kSegmentPipeline},
      {T::kAllgather, 1 * MiB, 8, 16, kElsewhere, P::kDirectRead},
      // gather (bytes: the total): pushes into a located root output from rooted_push_bytes
      // (64 KiB), else reads directly from single_copy_bytes (16 MiB).
      {T::kGather, 64 * KiB - 1, 2, 2, kLocated, P::kSegmentPipeline},
      {T::kGather, 64 * KiB, 2, 2, kLocated, P::kHeapPush},
      {T::kGather, 64 * KiB, 2, 2, kNoHeap, P::kSegmentPipeline},
      {T::kGather, 16 * MiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kGather, 16 * MiB, 2, 2, kElsewhere, P::kDirectRead},
      {T::kGather, 16 * MiB, 2, 2, kLocated, P::kHeapPush},
      {T::kGather, 16 * MiB, 2, 2, kNoCrossMemory, P::kSegmentPipeline},
      {T::kGather, 64 * KiB - 1, 4, 2, kLocated, P::kSegmentPipeline},
      {T::kGather, 64 * KiB, 4, 2, kLocated, P::kHeapPush},
      {T::kGather, 16 * MiB, 4, 2, kElsewhere, P::kDirectRead},
      {T::kGather, 64 * KiB - 1, 8, 16, kLocated, P::kSegmentPipeline},
      {T::kGather, 64 * KiB, 8, 16, kLocated, P::kHeapPush},
      {T::kGather, 16 * MiB - 1, 8, 16, kElsewhere, P::kSegmentPipeline},
      {T::kGather, 16 * MiB, 8, 16, kElsewhere, P::kDirectRead},
      // scatter: as gather, into the receivers' outputs.
      {T::kScatter, 64 * KiB - 1, 2, 2, kLocated, P::kSegmentPipeline},
      {T::kScatter, 64 * KiB, 2, 2, kLocated, P::kHeapPush},
      {T::kScatter, 16 * MiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kScatter, 16 * MiB, 2, 2, kElsewhere, P::kDirectRead},
      {T::kScatter, 64 * KiB, 4, 2, kLocated, P::kHeapPush},
      {T::kScatter, 16 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kScatter, 16 * MiB, 4, 2, kElsewhere, P::kDirectRead},
      {T::kScatter, 64 * KiB, 8, 16, kLocated, P::kHeapPush},
      {T::kScatter, 16 * MiB, 8, 16, kElsewhere, P::kDirectRead},
      {T::kScatter, 16 * MiB, 8, 16, kNoHeap, P::kDirectRead},
      // alltoall: pushes into located outputs, else the pipeline (which reads large pairs directly).
      {T::kAlltoall, 0, 2, 2, kLocated, P::kHeapPush},
      {T::kAlltoall, 0, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kAlltoall, 0, 4, 2, kLocated, P::kHeapPush},
      {T::kAlltoall, 0, 4, 2, kNoHeap, P::kSegmentPipeline},
      {T::kAlltoall, 0, 8, 16, kLocated, P::kHeapPush},
      {T::kAlltoall, 0, 8, 16, kElsewhere, P::kSegmentPipeline},
      // broadcast: readers read the root directly from broadcast_single_copy_bytes (16 KiB for a
      // pair, 64 KiB for more, 16 MiB where ranks share cores), and only with at most 4 ranks.
      {T::kBroadcast, 16 * KiB - 1, 2, 2, kElsewhere, P::kSegmentPipeline},
      {T::kBroadcast, 16 * KiB, 2, 2, kElsewhere, P::kDirectRead},
      {T::kBroadcast, 16 * KiB, 2, 2, kNoCrossMemory, P::kSegmentPipeline},
      {T::kBroadcast, 16 * MiB - 1, 4, 2, kElsewhere, P::kSegmentPipeline},
      {T::kBroadcast, 16 * MiB, 4, 2, kElsewhere, P::kDirectRead},
      {T::kBroadcast, 64 * KiB - 1, 4, 4, kElsewhere, P::kSegmentPipeline},
      {T::kBroadcast, 64 * KiB, 4, 4, kElsewhere, P::kDirectRead},
      {T::kBroadcast, 64 * KiB, 8, 16, kElsewhere, P::kSegmentPipeline},  // more than 4 readers
      {T::kBroadcast, 64 * MiB, 8, 16, kElsewhere, P::kSegmentPipeline},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(describe(r));
    const ShmThresholds th = choose_shm_thresholds(shm_policy_defaults(), r.ranks, r.cores);
    const ShmPath chosen = choose_shm_path(th, r.type, r.bytes, r.ranks, conditions(r.where));
    EXPECT_STREQ(shm_path_name(chosen), shm_path_name(r.expected));
  }
}

TEST(ShmPathChoice, TheLastPathOfEveryOrderIsThePipeline) {
  for (int t = 0; t < kNumCollectiveTypes; ++t) {
    const ShmPathOrder order = shm_path_order(static_cast<CollectiveType>(t));
    ASSERT_GE(order.count, 1);
    EXPECT_EQ(order.paths[order.count - 1], ShmPath::kSegmentPipeline) << collective_name(static_cast<T>(t));
    EXPECT_TRUE(shm_path_eligible(ShmPath::kSegmentPipeline, ShmThresholds{}, static_cast<T>(t), 0, 2, {}));
  }
}

struct RootedRow {
  T type;
  uint64_t bytes;
  int ranks;
  unsigned cores;
  Where where;
  bool expected;
};

// A broadcast or scatter whose root's buffer moves in one copy does not ride the control step:
// whether its outputs turn out to lie in the heaps is not yet known there.
TEST(ShmPathChoice, RootedMovesInOneCopySkipThePreload) {
  const RootedRow rows[] = {
      {T::kBroadcast, 16 * KiB - 1, 2, 2, kElsewhere, false},
      {T::kBroadcast, 16 * KiB, 2, 2, kElsewhere, true},
      {T::kBroadcast, 64 * MiB, 8, 16, kElsewhere, false},
      {T::kScatter, 64 * KiB - 1, 2, 2, kElsewhere, false},
      {T::kScatter, 64 * KiB, 2, 2, kElsewhere, true},  // the heaps may hold the outputs
      {T::kScatter, 64 * KiB, 2, 2, kNoHeap, false},
      {T::kScatter, 16 * MiB, 4, 2, kNoHeap, true},
      {T::kGather, 16 * MiB, 2, 2, kElsewhere, false},  // not rooted at the senders' end
  };
  for (const RootedRow& r : rows) {
    SCOPED_TRACE(std::string(collective_name(r.type)) + " of " + std::to_string(r.bytes) + " bytes, " +
                 std::to_string(r.ranks) + " ranks, " + where_name(r.where));
    const ShmThresholds th = choose_shm_thresholds(shm_policy_defaults(), r.ranks, r.cores);
    EXPECT_EQ(moves_rooted_directly(th, r.type, r.bytes, r.ranks, conditions(r.where)), r.expected);
  }
}

TEST(ShmPathChoice, WithinAPath) {
  const ShmThresholds pair = choose_shm_thresholds(shm_policy_defaults(), 2, 2);
  const ShmThresholds shared = choose_shm_thresholds(shm_policy_defaults(), 4, 2);
  const ShmThresholds many = choose_shm_thresholds(shm_policy_defaults(), 8, 16);
  // The idle side of a gather or scatter into the heaps reads a share from rooted_share_bytes, with few ranks.
  EXPECT_FALSE(shares_rooted_move(pair, 512 * KiB - 1, 2, true));
  EXPECT_TRUE(shares_rooted_move(pair, 512 * KiB, 2, true));
  EXPECT_FALSE(shares_rooted_move(pair, 512 * KiB, 2, false));
  EXPECT_FALSE(shares_rooted_move(shared, 1 * MiB - 1, 4, true));
  EXPECT_TRUE(shares_rooted_move(shared, 1 * MiB, 4, true));
  EXPECT_FALSE(shares_rooted_move(many, 64 * MiB, 8, true));
  // Pushes stream beyond L2 only where 8 or more ranks store on cores of their own, stores probed.
  EXPECT_EQ(push_stream_bytes(pair, 2, 2), 0u);
  EXPECT_EQ(push_stream_bytes(many, 8, 16), 2 * MiB);
  EXPECT_EQ(push_stream_bytes(many, 8, 4), 0u);
  EXPECT_EQ(push_stream_bytes(many, 4, 16), 0u);  // a process set of 4 on the same host
  Tunables given = shm_policy_defaults();
  given.shm_stream_bytes = 0;
  EXPECT_EQ(push_stream_bytes(choose_shm_thresholds(given, 8, 16), 8, 16), 0u);
  // The sizes every machine shares.
  EXPECT_EQ(pair.own_stream_bytes, 2 * MiB);
  EXPECT_EQ(pair.probed_stream_bytes, 16 * KiB);
  EXPECT_EQ(pair.broadcast_read_whole_bytes, 128 * KiB);
}

}  // namespace
}  // namespace horo
