// The response cache: what a lookup answers, which bit a response gets, and which one is
// evicted. Every rank must make the same choices from the same calls, or a bit would name
// different tensors on different ranks; these pin those choices down.
#include <gtest/gtest.h>

#include "engine/response_cache.h"

namespace horo {
namespace {

Request request(const std::string& name, std::vector<int64_t> shape = {4}) {
  Request q;
  q.name = name;
  q.shape = std::move(shape);
  return q;
}

Response response(const std::string& name, std::vector<int64_t> shape = {4}) {
  Response p;
  p.request = request(name, std::move(shape));
  return p;
}

TEST(ResponseCache, MissThenHitWithTheBitItWasGiven) {
  ResponseCache cache(4);
  int bit = -7;
  EXPECT_EQ(cache.lookup(request("a"), 0, 2, &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(bit, -7) << "a miss leaves the bit alone";
  cache.put(response("a"));
  cache.put(response("b"));
  EXPECT_EQ(cache.lookup(request("b"), 0, 2, &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(bit, 1);
  EXPECT_EQ(cache.bit_of("a"), 0);
  EXPECT_EQ(cache.get(1).request.name, "b");
  EXPECT_TRUE(cache.contains(0));
  EXPECT_FALSE(cache.contains(2));
  EXPECT_EQ(cache.bit_bound(), 2);
}

TEST(ResponseCache, SameNameOtherSignatureIsStale) {
  ResponseCache cache(4);
  cache.put(response("w", {4}));
  int bit = -1;
  EXPECT_EQ(cache.lookup(request("w", {5}), 0, 2, &bit), ResponseCache::Lookup::kStale);
  EXPECT_EQ(bit, 0) << "a stale lookup names the bit to invalidate";
  Request other_op = request("w", {4});
  other_op.op = ReduceOp::kMax;
  EXPECT_EQ(cache.lookup(other_op, 0, 2, &bit), ResponseCache::Lookup::kStale);
}

TEST(ResponseCache, RaggedCollectivesCompareEachRanksOwnFirstDimension) {
  ResponseCache cache(4);
  Response gathered = response("rows", {3, 2});
  gathered.request.type = CollectiveType::kAllgather;
  gathered.per_rank = {3, 5};  // rank 0 sent 3 rows, rank 1 sent 5
  cache.put(gathered);
  Request mine = request("rows", {5, 2});
  mine.type = CollectiveType::kAllgather;
  int bit = -1;
  EXPECT_EQ(cache.lookup(mine, 1, 2, &bit), ResponseCache::Lookup::kHit);
  EXPECT_EQ(cache.lookup(mine, 0, 2, &bit), ResponseCache::Lookup::kStale) << "rank 0 had 3 rows";
}

TEST(ResponseCache, FullCacheEvictsTheLeastRecentlyUsedAndReusesItsBit) {
  ResponseCache cache(3);
  cache.put(response("a"));  // bit 0
  cache.put(response("b"));  // bit 1
  cache.put(response("c"));  // bit 2
  cache.touch(0);            // a is now the most recent: b is the oldest
  cache.put(response("d"));
  EXPECT_EQ(cache.bit_of("b"), -1) << "the least recently used response goes";
  EXPECT_EQ(cache.bit_of("d"), 1) << "and its bit is handed out again";
  EXPECT_EQ(cache.bit_of("a"), 0);
  EXPECT_EQ(cache.bit_bound(), 3) << "no bit beyond the capacity";
}

TEST(ResponseCache, PutOfACachedNameReplacesItAndErasedBitsAreReusedLowestFirst) {
  ResponseCache cache(8);
  for (const char* name : {"a", "b", "c", "d"}) cache.put(response(name));
  cache.erase(2);
  cache.erase(1);
  EXPECT_FALSE(cache.contains(1));
  cache.erase(1);  // erasing a free bit changes nothing
  cache.put(response("e"));
  EXPECT_EQ(cache.bit_of("e"), 1);
  cache.put(response("a", {9}));  // a new signature under a cached name
  EXPECT_EQ(cache.get(cache.bit_of("a")).request.shape, std::vector<int64_t>{9});
  EXPECT_EQ(cache.bit_of("a"), 0) << "a's old bit was freed first, and it is the lowest";
}

TEST(ResponseCache, CapacityZeroCachesNothing) {
  ResponseCache cache(0);
  EXPECT_FALSE(cache.enabled());
  cache.put(response("a"));
  int bit = -1;
  EXPECT_EQ(cache.lookup(request("a"), 0, 1, &bit), ResponseCache::Lookup::kMiss);
  EXPECT_EQ(cache.bit_bound(), 0);
}

TEST(ResponseCache, TwoCachesFedTheSameCallsAgreeOnEveryBit) {
  // Stands in for two ranks: identical put/touch/erase sequences, identical bits.
  ResponseCache rank0(5), rank1(5);
  for (int step = 0; step < 200; ++step) {
    for (ResponseCache* cache : {&rank0, &rank1}) {
      const std::string name = "t" + std::to_string((step * 7) % 11);
      if (step % 5 == 4 && cache->bit_of(name) >= 0) {
        cache->erase(cache->bit_of(name));
      } else if (cache->bit_of(name) >= 0) {
        cache->touch(cache->bit_of(name));
      } else {
        cache->put(response(name));
      }
    }
  }
  ASSERT_EQ(rank0.bit_bound(), rank1.bit_bound());
  for (int bit = 0; bit < rank0.bit_bound(); ++bit) {
    ASSERT_EQ(rank0.contains(bit), rank1.contains(bit));
    if (rank0.contains(bit)) {
      EXPECT_EQ(rank0.get(bit).request.name, rank1.get(bit).request.name);
    }
  }
}

}  // namespace
}  // namespace horo
