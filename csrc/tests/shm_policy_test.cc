// The shared-memory policy's decisions as a table: (ranks on the host, cores, settings) ->
// the thresholds each path starts at and whether preloads come in pieces, and (collective,
// bytes, pair in pieces) -> whether a cached collective rides the control step. A change of
// policy must change this table.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "common/tunables.h"
#include "tests/shm_policy_defaults.h"
#include "transport/shm/policy.h"
#include "wire/messages.h"

namespace horo {
namespace {

Tunables defaults() { return shm_policy_defaults(); }

struct Row {
  int ranks;
  unsigned cores;
  uint64_t broadcast, exchange, reduce, rooted_reduce, push, rooted_share;
  bool preloads_in_pieces;
};

TEST(ShmPolicy, ThresholdsByRanksAndCores) {
  const Row rows[] = {
      // ranks, cores: broadcast read, exchange read, reduce read, rooted reduce read, push, rooted share,
      // preloads in pieces
      {2, 2, 16 * KiB, 1 * MiB, 512 * KiB, 512 * KiB, 0, 512 * KiB, true},
      {4, 4, 64 * KiB, 1 * MiB, 512 * KiB, 512 * KiB, 0, 512 * KiB, true},
      {8, 16, 64 * KiB, 1 * MiB, 1 * MiB, 1 * MiB, 0, 512 * KiB, true},
      {16, 16, 64 * KiB, 1 * MiB, 2 * MiB, 2 * MiB, 0, 512 * KiB, true},
      {4, 2, 16 * MiB, 4 * MiB, 1 * MiB, 16 * MiB, 1 * MiB, 1 * MiB, false},  // oversubscribed
      {3, 2, 16 * MiB, 4 * MiB, 1 * MiB, 16 * MiB, 1 * MiB, 1 * MiB, false},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE("ranks " + std::to_string(r.ranks) + ", cores " + std::to_string(r.cores));
    const ShmThresholds th = choose_shm_thresholds(defaults(), r.ranks, r.cores);
    EXPECT_EQ(th.broadcast_single_copy_bytes, r.broadcast);
    EXPECT_EQ(th.exchange_single_copy_bytes, r.exchange);
    EXPECT_EQ(th.reduce_single_copy_bytes, r.reduce);
    EXPECT_EQ(th.rooted_reduce_single_copy_bytes, r.rooted_reduce);
    EXPECT_EQ(th.allreduce_push_bytes, r.push);
    EXPECT_EQ(th.rooted_share_bytes, r.rooted_share);
    EXPECT_EQ(preloads_in_pieces(static_cast<unsigned>(r.ranks) > r.cores), r.preloads_in_pieces);
    EXPECT_EQ(th.single_copy_bytes, 16 * MiB);
    EXPECT_EQ(th.reducescatter_single_copy_bytes, 4 * MiB);
    EXPECT_EQ(th.stream_bytes, ShmThresholds::kProbe);
    EXPECT_TRUE(th.reads_directly());
  }
}

TEST(ShmPolicy, ASettingOverridesThePolicyAndOneVariableSetsItsFamily) {
  Tunables t = defaults();
  t.shm_single_copy_bytes = 0;
  t.shm_exchange_single_copy_bytes = 0;
  t.shm_reduce_single_copy_bytes = 0;
  t.shm_allreduce_push_bytes = 8 * KiB;
  t.shm_stream_bytes = 0;
  const ShmThresholds off = choose_shm_thresholds(t, 4, 2);
  EXPECT_FALSE(off.reads_directly());
  EXPECT_EQ(off.allreduce_push_bytes, 8 * KiB);
  EXPECT_EQ(off.stream_bytes, 0u);
  t.shm_single_copy_bytes = 300 * KiB;
  t.shm_reduce_single_copy_bytes = 700 * KiB;
  const ShmThresholds set = choose_shm_thresholds(t, 2, 2);
  EXPECT_EQ(set.broadcast_single_copy_bytes, 300 * KiB);
  EXPECT_EQ(set.rooted_share_bytes, 300 * KiB);
  EXPECT_EQ(set.rooted_reduce_single_copy_bytes, 700 * KiB);
  EXPECT_EQ(set.reducescatter_single_copy_bytes, 700 * KiB);
}

Request request(CollectiveType type, int64_t bytes, DataType dtype = DataType::kFloat32) {
  Request q;
  q.type = type;
  q.dtype = dtype;
  q.shape = {bytes / 4};
  return q;
}

struct PreloadRow {
  CollectiveType type;
  int64_t bytes;
  int ranks;
  bool oversubscribed;  // a pair in pieces: 2 ranks, not oversubscribed
  int set_rank, root;
  int64_t expected;  // -1: runs as negotiated
};

TEST(ShmPolicy, WhichCachedCollectivesRideTheControlStep) {
  const Tunables t = defaults();
  const ShmThresholds th = choose_shm_thresholds(t, 2, 2);
  const PreloadRow rows[] = {
      {CollectiveType::kAllreduce, 16 * KiB, 2, true, 0, 0, 16 * KiB},
      {CollectiveType::kAllreduce, 32 * KiB, 2, false, 0, 0, -1},  // above the one-step size
      {CollectiveType::kReduce, 32 * KiB, 2, false, 1, 0, 32 * KiB},  // the root reduces pieces as they come
      {CollectiveType::kReduce, 32 * KiB, 2, true, 1, 0, -1},
      {CollectiveType::kReduce, 128 * KiB, 2, false, 1, 0, -1},
      {CollectiveType::kAllgather, 2 * KiB, 2, false, 0, 0, 2 * KiB},  // a pair: up to 4 KiB of output
      {CollectiveType::kAllgather, 4 * KiB, 2, false, 0, 0, -1},
      {CollectiveType::kAllgather, 8 * KiB, 2, true, 0, 0, 8 * KiB},
      {CollectiveType::kAlltoall, 4 * KiB, 2, false, 0, 0, 4 * KiB},
      {CollectiveType::kAlltoall, 8 * KiB, 2, false, 0, 0, -1},
      {CollectiveType::kGather, 8 * KiB, 2, false, 0, 0, 0},  // the root sends nothing
      {CollectiveType::kGather, 48 * KiB, 2, false, 1, 0, 48 * KiB},
      {CollectiveType::kBroadcast, 1 * MiB, 2, true, 0, 0, 1 * MiB},  // only the root's input
      {CollectiveType::kBroadcast, 1 * MiB, 2, true, 1, 0, 0},
      {CollectiveType::kReducescatter, 1 * MiB, 2, true, 0, 0, 1 * MiB},
      {CollectiveType::kBarrier, 0, 2, true, 0, 0, -1},
      {CollectiveType::kAllgather, 8 * KiB, 3, false, 0, 0, 8 * KiB},  // not a pair: not in pieces
      {CollectiveType::kReduce, 32 * KiB, 3, false, 1, 0, -1},
  };
  for (const PreloadRow& r : rows) {
    SCOPED_TRACE(std::string(collective_name(r.type)) + " " + std::to_string(r.bytes) + " bytes, " +
                 std::to_string(r.ranks) + " ranks" + (r.oversubscribed ? ", oversubscribed" : ""));
    EXPECT_EQ(preload_bytes(th, t, request(r.type, r.bytes), r.set_rank, r.root, r.ranks, r.oversubscribed),
              r.expected);
  }
  Request scaled = request(CollectiveType::kAllreduce, 4 * KiB);
  scaled.prescale = 0.5;  // reduced as is only
  EXPECT_EQ(preload_bytes(th, t, scaled, 0, 0, 2, true), -1);
  Request gpu = request(CollectiveType::kAllreduce, 4 * KiB);
  gpu.memory = Memory::kCuda;
  EXPECT_EQ(preload_bytes(th, t, gpu, 0, 0, 2, true), -1);
}

}  // namespace
}  // namespace horo
