// Scaling a reduced buffer: Average's 1/n divides a float32 by n, correctly rounded (as torch's
// DDP and TensorFlow divide), whatever path the CPU takes; a caller's own factor multiplies in the
// tensor's precision, as Horovod's does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "reduce/reduce_kernels.h"

namespace horo {
namespace {

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> mantissa(-1000.0f, 1000.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = mantissa(gen);
  return v;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(ScaleFloat32, AverageDividesCorrectlyRounded) {
  for (int n : {3, 5, 6, 7, 12, 100, 1000}) {
    auto x = random_floats(4099, n);  // not a multiple of a vector's width
    std::vector<float> out(x.size());
    copy_scaled(DataType::kFloat32, out.data(), x.data(), x.size(), 1.0 / n);
    auto in_place = x;
    scale_buffer(DataType::kFloat32, in_place.data(), in_place.size(), 1.0 / n);
    for (size_t i = 0; i < x.size(); ++i) {
      const float want = x[i] / static_cast<float>(n);
      ASSERT_TRUE(same_bits(out[i], want)) << x[i] << " / " << n << ": " << out[i] << " != " << want;
      ASSERT_TRUE(same_bits(in_place[i], want)) << x[i] << " / " << n << " in place";
    }
  }
}

TEST(ScaleFloat32, AverageKeepsSignedZeroInfinityAndNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x = {-0.0f, 0.0f, inf, -inf, std::nanf(""), 3.0f, -6.0f, 1.0f};
  scale_buffer(DataType::kFloat32, x.data(), x.size(), 1.0 / 3);
  EXPECT_TRUE(same_bits(x[0], -0.0f));
  EXPECT_TRUE(same_bits(x[1], 0.0f));
  EXPECT_EQ(x[2], inf);
  EXPECT_EQ(x[3], -inf);
  EXPECT_TRUE(std::isnan(x[4]));
  EXPECT_EQ(x[5], 1.0f);
  EXPECT_EQ(x[6], -2.0f);
  EXPECT_TRUE(same_bits(x[7], 1.0f / 3.0f));
}

TEST(ScaleFloat32, CallersFactorMultipliesInFloat32) {
  const double factor = 0.1915194503788923;  // no 1/n
  auto x = random_floats(1031, 7);
  std::vector<float> out(x.size());
  copy_scaled(DataType::kFloat32, out.data(), x.data(), x.size(), factor);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_TRUE(same_bits(out[i], x[i] * static_cast<float>(factor)));
}

TEST(ScaleFloat64, AverageMultipliesByTheReciprocal) {
  std::vector<double> x = {1.0, 10.0, -7.0};
  scale_buffer(DataType::kFloat64, x.data(), x.size(), 1.0 / 3);
  EXPECT_EQ(x[0], 1.0 * (1.0 / 3));
  EXPECT_EQ(x[1], 10.0 * (1.0 / 3));
  EXPECT_EQ(x[2], -7.0 * (1.0 / 3));
}

}  // namespace
}  // namespace horo
