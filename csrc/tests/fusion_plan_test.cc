// Fusion planning: which ready responses share one collective. Every rank plans from the same
// list, so the plan must depend on nothing else; these check what fuses, what travels alone,
// and that a plan keeps each response once and in order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/fusion_buffer.h"

namespace horo {
namespace {

constexpr size_t kNoLimit = size_t(1) << 40;

Response ready(const std::string& name, int64_t floats, CollectiveType type = CollectiveType::kAllreduce,
               DataType dtype = DataType::kFloat32) {
  Response p;
  p.request.name = name;
  p.request.type = type;
  p.request.dtype = dtype;
  p.request.shape = {floats};
  return p;
}

std::vector<std::vector<std::string>> plan(const std::vector<Response>& responses, size_t threshold,
                                           size_t max_host = kNoLimit, size_t max_gpu = kNoLimit) {
  std::vector<std::vector<Response>> groups;
  plan_fusion(responses, threshold, max_host, max_gpu, &groups);
  std::vector<std::vector<std::string>> names;
  for (const auto& group : groups) {
    names.emplace_back();
    for (const auto& p : group) names.back().push_back(p.request.name);
  }
  return names;
}

using Groups = std::vector<std::vector<std::string>>;

TEST(FusionPlan, LikeTensorsFuseUpToTheThresholdInOrder) {
  // 40 bytes each: two fit under 100, the third opens a new group.
  EXPECT_EQ(plan({ready("a", 10), ready("b", 10), ready("c", 10)}, 100), (Groups{{"a", "b"}, {"c"}}));
  EXPECT_EQ(plan({ready("a", 10), ready("b", 10), ready("c", 10)}, 120), (Groups{{"a", "b", "c"}}));
}

TEST(FusionPlan, OnlyResponsesWithTheSameKeyFuse) {
  Response half = ready("h", 10, CollectiveType::kAllreduce, DataType::kFloat16);
  Response gathered = ready("g", 10, CollectiveType::kAllgather);
  Response maxed = ready("m", 10);
  maxed.request.op = ReduceOp::kMax;
  Response scaled = ready("s", 10);
  scaled.request.postscale = 0.5;
  Response rooted = ready("r1", 10, CollectiveType::kBroadcast);
  Response other_root = ready("r2", 10, CollectiveType::kBroadcast);
  other_root.request.root = 1;
  Response on_gpu = ready("d", 10);
  on_gpu.request.memory = Memory::kCuda;
  EXPECT_EQ(plan({ready("a", 10), half, gathered, maxed, scaled, rooted, other_root, on_gpu, ready("b", 10)}, 1 << 20),
            (Groups{{"a", "b"}, {"h"}, {"g"}, {"m"}, {"s"}, {"r1"}, {"r2"}, {"d"}}))
      << "groups follow their first responses' order; only a and b share every key";
}

TEST(FusionPlan, ThresholdZeroFusesNothing) {
  EXPECT_EQ(plan({ready("a", 1), ready("b", 1)}, 0), (Groups{{"a"}, {"b"}}));
}

TEST(FusionPlan, ErrorsPreloadedInputsAndUnfusableKindsTravelAlone) {
  Response failed = ready("e", 10);
  failed.kind = Response::Kind::kError;
  Response preloaded = ready("p", 10);
  preloaded.preloaded = true;
  EXPECT_EQ(plan({ready("a", 10), failed, preloaded, ready("g1", 10, CollectiveType::kGather),
                  ready("g2", 10, CollectiveType::kGather), ready("x1", 10, CollectiveType::kAlltoall),
                  ready("b", 10)},
                 1 << 20),
            (Groups{{"a", "b"}, {"e"}, {"p"}, {"g1"}, {"g2"}, {"x1"}}));
}

TEST(FusionPlan, LargeTensorsRunAloneByTheirMemorysLimit) {
  Response big_host = ready("H", 100);  // 400 bytes
  Response big_gpu = ready("G", 100);
  big_gpu.request.memory = Memory::kCuda;
  Response gpu_small = ready("g", 10);
  gpu_small.request.memory = Memory::kCuda;
  // Host limit 256 bytes, GPU limit 1024: the host tensor runs alone, the GPU one still fuses.
  EXPECT_EQ(plan({ready("a", 10), big_host, big_gpu, ready("b", 10), gpu_small}, 1 << 20, 256, 1024),
            (Groups{{"a", "b"}, {"H"}, {"G", "g"}}));
}

TEST(FusionPlan, ASingleResponseIsOneGroupAndGroupsAreRefilledInPlace) {
  std::vector<std::vector<Response>> groups;
  plan_fusion({ready("a", 10), ready("b", 10, CollectiveType::kAllgather), ready("c", 10)}, 1 << 20, kNoLimit,
              kNoLimit, &groups);
  ASSERT_EQ(groups.size(), 2u);
  plan_fusion({ready("z", 10)}, 1 << 20, kNoLimit, kNoLimit, &groups);
  ASSERT_EQ(groups.size(), 1u) << "a smaller plan leaves no group of the last one behind";
  ASSERT_EQ(groups[0].size(), 1u);
  EXPECT_EQ(groups[0][0].request.name, "z");
}

TEST(FusionPlan, EveryResponseIsPlannedOnceAndKeepsItsOrderWithinItsGroup) {
  std::vector<Response> responses;
  for (int i = 0; i < 300; ++i) {
    const auto type = (i % 3 == 0) ? CollectiveType::kAllgather : CollectiveType::kAllreduce;
    const auto dtype = (i % 4 == 0) ? DataType::kFloat64 : DataType::kFloat32;
    responses.push_back(ready("t" + std::to_string(i), 1 + (i * 37) % 500, type, dtype));
  }
  std::vector<std::vector<Response>> groups;
  const size_t threshold = 4096;
  plan_fusion(responses, threshold, 1500, 1500, &groups);
  std::vector<int> seen(responses.size(), 0);
  for (const auto& group : groups) {
    ASSERT_FALSE(group.empty());
    size_t bytes = 0;
    int last = -1;
    for (const auto& p : group) {
      const int index = std::stoi(p.request.name.substr(1));
      EXPECT_GT(index, last) << "order within a group follows the responses'";
      last = index;
      ++seen[index];
      bytes += static_cast<size_t>(p.request.num_elements()) * dtype_size(p.request.dtype);
      EXPECT_EQ(p.request.type, group.front().request.type);
      EXPECT_EQ(p.request.dtype, group.front().request.dtype);
    }
    if (group.size() > 1) {
      EXPECT_LE(bytes, threshold);
    }
  }
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << "response " << i;
}

}  // namespace
}  // namespace horo
