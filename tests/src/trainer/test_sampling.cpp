// pick_token: greedy is the argmax, top-k never leaves the k largest, and
// draws at a temperature follow softmax(logits / T).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "src/trainer/sampling.h"

namespace fsdp {
namespace {

TEST(PickToken, GreedyIsTheArgmaxWithTiesToTheLowestIndex) {
  std::mt19937_64 rng(1);
  EXPECT_EQ(pick_token({0.1f, 2.5f, -1.0f, 2.4f}, 0.0f, 40, rng), 1);
  EXPECT_EQ(pick_token({3.0f, 1.0f, 3.0f}, 0.0f, 0, rng), 0);
  // k = 1 is greedy at any temperature.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(pick_token({0.0f, 0.5f, 0.4f}, 5.0f, 1, rng), 1);
  // NaN never wins.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(pick_token({nan, -3.0f, nan}, 0.0f, 0, rng), 1);
}

TEST(PickToken, TopKNeverLeavesTheKLargest) {
  std::mt19937_64 rng(7);
  const std::vector<float> logits = {0.0f, 1.0f, 0.9f, -2.0f, 0.95f, 0.2f};
  for (int i = 0; i < 2000; ++i) {
    const int t = pick_token(logits, 10.0f, 3, rng);  // a flat softmax: all three appear
    EXPECT_TRUE(t == 1 || t == 4 || t == 2) << t;
  }
}

TEST(PickToken, DrawsFollowTheSoftmax) {
  std::mt19937_64 rng(42);
  const std::vector<float> logits = {1.0f, 0.0f, -1.0f, 2.0f};
  const float temperature = 0.7f;
  std::vector<double> want(logits.size());
  double z = 0;
  for (size_t i = 0; i < logits.size(); ++i) z += want[i] = std::exp(logits[i] / temperature);
  const int draws = 40000;
  std::vector<int> seen(logits.size(), 0);
  for (int i = 0; i < draws; ++i) ++seen[size_t(pick_token(logits, temperature, 0, rng))];
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = want[i] / z, got = double(seen[i]) / draws;
    // 5 standard deviations of a binomial proportion: a wrong temperature or
    // an off-by-one in the cumulative sum is far outside.
    EXPECT_NEAR(got, p, 5 * std::sqrt(p * (1 - p) / draws) + 1e-3) << "token " << i;
  }
  // The same seed gives the same draws: samples are reproducible.
  std::mt19937_64 a(3), b(3);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(pick_token(logits, 1.0f, 0, a), pick_token(logits, 1.0f, 0, b));
}

}  // namespace
}  // namespace fsdp
