// The CPU reference of NorMuon's two ops (model/ops.h: row_mean_squares,
// normuon_scale) against double-precision loops written from the definition,
// and the two properties the method is for: with the current rows' mean
// squares as the moment (beta2 = 0) every row of the result has the same
// RMS, and the update keeps its Frobenius norm whatever the moment.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/cpu/cpu_ops.h"
#include "shard/muon.h"

namespace fsdp {
namespace {

constexpr int kRows = 13, kCols = 21;

// Rows of very different sizes, as orthogonalisation leaves them.
std::vector<float> update_values() {
  std::vector<float> x(size_t(kRows) * kCols);
  for (int r = 0; r < kRows; ++r)
    for (int c = 0; c < kCols; ++c)
      x[size_t(r) * kCols + c] = float(std::sin(0.7 * r + 1.3 * c) * (0.2 + 0.3 * r));
  return x;
}

struct Scaled {
  std::vector<float> x, factors, moments;
};

// The whole op on the CPU: mean squares, then the scale with `moments` as
// the old second moments.
Scaled run(CpuOps& ops, const std::vector<float>& values, const std::vector<float>& moments,
           float beta2) {
  Tensor x = ops.alloc(DType::f32, kRows * kCols), stats = ops.alloc(DType::f32, 2 * kRows);
  std::copy(values.begin(), values.end(), x.f32());
  ops.row_mean_squares(stats.slice(0, kRows), x, kRows, kCols);
  std::copy(moments.begin(), moments.end(), stats.f32() + kRows);
  ops.normuon_scale(x, 0, kRows * kCols, stats, kRows, kCols, beta2, kNorMuonEps);
  Scaled s{std::vector<float>(x.f32(), x.f32() + kRows * kCols),
           std::vector<float>(stats.f32(), stats.f32() + kRows),
           std::vector<float>(stats.f32() + kRows, stats.f32() + 2 * kRows)};
  ops.free(x), ops.free(stats);
  return s;
}

double frobenius(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

double row_rms(const std::vector<float>& x, int r) {
  double s = 0;
  for (int c = 0; c < kCols; ++c) s += double(x[size_t(r) * kCols + c]) * x[size_t(r) * kCols + c];
  return std::sqrt(s / kCols);
}

TEST(CpuNorMuon, MatchesTheDefinition) {
  CpuOps ops;
  const std::vector<float> x = update_values();
  std::vector<float> old(kRows);
  for (int r = 0; r < kRows; ++r) old[size_t(r)] = 0.01f * float(r % 4);  // one row at 0
  const float beta2 = 0.95f;
  const Scaled got = run(ops, x, old, beta2);
  // In double from the definition: m, v, s, the norm-keeping factor.
  std::vector<double> m(kRows), v(kRows), s(kRows);
  double sum_m = 0, sum_ms2 = 0;
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) m[size_t(r)] += std::pow(x[size_t(r) * kCols + c], 2) / kCols;
    v[size_t(r)] = beta2 * old[size_t(r)] + (1 - beta2) * m[size_t(r)];
    s[size_t(r)] = 1 / (std::sqrt(v[size_t(r)]) + kNorMuonEps);
    sum_m += m[size_t(r)];
    sum_ms2 += m[size_t(r)] * s[size_t(r)] * s[size_t(r)];
  }
  for (int r = 0; r < kRows; ++r) {
    EXPECT_NEAR(got.moments[size_t(r)], v[size_t(r)], 1e-6 * v[size_t(r)]) << "row " << r;
    const double f = s[size_t(r)] * std::sqrt(sum_m / sum_ms2);
    EXPECT_NEAR(got.factors[size_t(r)], f, 2e-6 * f) << "row " << r;
    for (int c = 0; c < kCols; ++c) {
      const double want = x[size_t(r) * kCols + c] * f;
      EXPECT_NEAR(got.x[size_t(r) * kCols + c], want, 3e-6 * std::abs(want) + 1e-12)
          << r << ", " << c;
    }
  }
}

TEST(CpuNorMuon, EvensTheRowsAndKeepsTheNorm) {
  CpuOps ops;
  const std::vector<float> x = update_values();
  // beta2 = 0: the moment is this update's own: every row ends at one RMS.
  const Scaled even = run(ops, x, std::vector<float>(kRows, 0.5f), 0.0f);
  ASSERT_GT(row_rms(x, kRows - 1), 5 * row_rms(x, 0));  // the input's rows are far apart
  for (int r = 1; r < kRows; ++r) EXPECT_NEAR(row_rms(even.x, r), row_rms(even.x, 0), 1e-5);
  EXPECT_NEAR(frobenius(even.x), frobenius(x), 1e-5 * frobenius(x));
  // An old moment pulls each row's factor towards it, and the norm still holds.
  const Scaled pulled = run(ops, x, std::vector<float>(kRows, 0.5f), 0.9f);
  EXPECT_NEAR(frobenius(pulled.x), frobenius(x), 1e-5 * frobenius(x));
  EXPECT_GT(row_rms(pulled.x, kRows - 1), 2 * row_rms(pulled.x, 0));
}

// A rank scales its slice alone, from anywhere in the matrix: the same bits
// as scaling the whole, and the stats it returns the same too.
TEST(CpuNorMuon, ASliceIsScaledAsInTheWhole) {
  CpuOps ops;
  const std::vector<float> x = update_values();
  const std::vector<float> old(kRows, 0.003f);
  const Scaled whole = run(ops, x, old, 0.95f);
  const int64_t first = 2 * kCols + 5, count = 4 * kCols + 3;  // starts and ends inside rows
  Tensor slice = ops.alloc(DType::f32, count), stats = ops.alloc(DType::f32, 2 * kRows),
         full = ops.alloc(DType::f32, kRows * kCols);
  std::copy(x.begin(), x.end(), full.f32());
  std::copy(x.begin() + first, x.begin() + first + count, slice.f32());
  ops.row_mean_squares(stats.slice(0, kRows), full, kRows, kCols);
  std::copy(old.begin(), old.end(), stats.f32() + kRows);
  ops.normuon_scale(slice, first, count, stats, kRows, kCols, 0.95f, kNorMuonEps);
  for (int64_t i = 0; i < count; ++i) ASSERT_EQ(slice.f32()[i], whole.x[size_t(first + i)]) << i;
  for (int r = 0; r < kRows; ++r) {
    EXPECT_EQ(stats.f32()[r], whole.factors[size_t(r)]);
    EXPECT_EQ(stats.f32()[kRows + r], whole.moments[size_t(r)]);
  }
  ops.free(slice), ops.free(stats), ops.free(full);
}

TEST(CpuNorMuon, ZeroStaysZeroAndNaNStaysNaN) {
  CpuOps ops;
  const Scaled zero =
      run(ops, std::vector<float>(kRows * kCols, 0.0f), std::vector<float>(kRows, 0.0f), 0.95f);
  for (float v : zero.x) ASSERT_EQ(v, 0.0f);
  std::vector<float> x = update_values();
  x[5] = std::numeric_limits<float>::quiet_NaN();
  const Scaled nan = run(ops, x, std::vector<float>(kRows, 0.0f), 0.95f);
  for (int r = 0; r < kRows; ++r) EXPECT_TRUE(std::isnan(nan.x[size_t(r) * kCols])) << r;
}

TEST(CpuNorMuon, TheFrontDoorRefusesBadArguments) {
  CpuOps ops;
  Tensor x = ops.alloc(DType::f32, 20), stats = ops.alloc(DType::f32, 8);
  EXPECT_THROW(ops.normuon_scale(x, 15, 10, stats, 4, 5, 0.9f, 1e-8f), Error);  // past the matrix
  EXPECT_THROW(ops.normuon_scale(x, 0, 20, stats.slice(0, 7), 4, 5, 0.9f, 1e-8f), Error);
  EXPECT_THROW(ops.normuon_scale(x, 0, 20, stats, 4, 5, 1.0f, 1e-8f), Error);  // beta2
  EXPECT_THROW(ops.normuon_scale(x, 0, 20, x, 4, 5, 0.9f, 1e-8f), Error);      // stats overlap x
  EXPECT_THROW(ops.row_mean_squares(stats, x, 5, 5), Error);                   // x too short
  EXPECT_THROW(ops.row_mean_squares(x, x, 4, 5), Error);                       // out overlaps x
  // Overlaps past the first elements of the shorter side count too.
  EXPECT_THROW(ops.row_mean_squares(x.slice(10, 4), x, 4, 4), Error);
  EXPECT_THROW(ops.normuon_scale(x, 0, 20, x.slice(12, 8), 4, 5, 0.9f, 1e-8f), Error);
  EXPECT_NO_THROW(ops.row_mean_squares(x.slice(16, 4), x, 4, 4));  // adjacent, apart
  ops.free(x), ops.free(stats);
}

}  // namespace
}  // namespace fsdp
