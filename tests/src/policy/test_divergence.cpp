// What src/policy/divergence.h calls a diverged step. (The rollback that follows is
// tested end to end in rollback_test.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "src/policy/divergence.h"

namespace fsdp {
namespace {

DivergenceOptions window(int w, float factor = 2.0f) {
  DivergenceOptions o;
  o.spike_window = w;
  o.spike_factor = factor;
  return o;
}

TEST(Median, OddEvenAndEmpty) {
  EXPECT_EQ(median_of({}), 0);
  EXPECT_EQ(median_of({3, 1, 2}), 2);
  EXPECT_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(median_of({5, 5, 1, 100}), 5);
}

TEST(SpikeDetector, NonFiniteAlwaysDiverges) {
  const double inf = std::numeric_limits<double>::infinity();
  SpikeDetector d(window(4, 0.0f));  // spike test off: only non-finite values count
  EXPECT_NE(d.judge(std::nan(""), 1.0).find("loss is not finite"), std::string::npos);
  EXPECT_NE(d.judge(inf, 1.0).find("loss is not finite"), std::string::npos);
  EXPECT_NE(d.judge(2.0, std::nan("")).find("gradient norm is not finite"), std::string::npos);
  for (int i = 0; i < 10; ++i) d.accept(1.0);
  EXPECT_EQ(d.judge(1000.0, 1.0), "");
}

TEST(SpikeDetector, JudgesOnlyAFullWindowAgainstItsMedian) {
  SpikeDetector d(window(3));
  d.accept(10.0);
  d.accept(1.0);
  EXPECT_EQ(d.judge(100.0, 1.0), "") << "two losses are not a window of three";
  d.accept(2.0);  // window 10, 1, 2: median 2
  EXPECT_EQ(d.judge(4.0, 1.0), "") << "exactly the factor is not above it";
  const std::string why = d.judge(4.01, 1.0);
  EXPECT_NE(why.find("2.00 times 2.0000, the median of the last 3 steps (--spike-factor 2)"),
            std::string::npos)
      << why;
  d.accept(3.0);  // the oldest (10) leaves: 1, 2, 3, median 2
  EXPECT_EQ(d.history(), (std::vector<double>{1, 2, 3}));
  EXPECT_NE(d.judge(4.5, 1.0), "");
  d.accept(9.0);  // 2, 3, 9: median 3
  EXPECT_EQ(d.judge(6.0, 1.0), "");
}

TEST(SpikeDetector, RestoreKeepsTheNewestOfALongerHistory) {
  SpikeDetector d(window(2));
  d.restore({1, 2, 3, 4});
  EXPECT_EQ(d.history(), (std::vector<double>{3, 4}));
  EXPECT_NE(d.judge(7.1, 1.0), "");  // median 3.5
  SpikeDetector again(window(5));
  again.restore(d.history());
  EXPECT_EQ(again.history(), (std::vector<double>{3, 4}));
  EXPECT_EQ(again.judge(100.0, 1.0), "") << "two values do not fill a window of five";
}

// The rerun check's comparison (src/trainer/trainer_rerun.cpp): bitwise where the
// tolerance is 0; NaN and Inf repeat only as themselves.
TEST(SameRerunValue, EqualNanAndInfRepeatFiniteAndNonFiniteDiffer) {
  const double nan = std::nan(""), inf = INFINITY;
  EXPECT_TRUE(same_rerun_value(1.5, 1.5, 0));
  EXPECT_FALSE(same_rerun_value(1.5, std::nextafter(1.5, 2.0), 0)) << "one ulp is a change";
  EXPECT_TRUE(same_rerun_value(nan, nan, 0));
  EXPECT_TRUE(same_rerun_value(inf, inf, 0));
  EXPECT_FALSE(same_rerun_value(inf, -inf, 1));
  EXPECT_FALSE(same_rerun_value(nan, 1.0, 1));
  EXPECT_FALSE(same_rerun_value(2.0, nan, 1));
  EXPECT_FALSE(same_rerun_value(inf, 1e300, 1)) << "Inf is no rounding of a finite value";
}

TEST(SameRerunValue, ToleranceIsRelativeToTheLarger) {
  EXPECT_TRUE(same_rerun_value(100.0, 100.9, 1e-2));
  EXPECT_FALSE(same_rerun_value(100.0, 101.1, 1e-2));
  EXPECT_TRUE(same_rerun_value(-3e-8, -3.01e-8, 1e-2)) << "small values are judged by their size";
  EXPECT_FALSE(same_rerun_value(1.0, 10.0, 1e-2)) << "a 10x fault is far outside";
  EXPECT_TRUE(same_rerun_value(0.0, 0.0, 0));
}

}  // namespace
}  // namespace fsdp
