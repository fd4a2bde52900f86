// The CPU reference of a value embedding's mix (model/cpu/cpu_mixes.cpp)
// against double-precision formulas: v read and written in place inside rows
// of a wider q|k|v-like buffer whose other columns (NaN) stay untouched, the
// table's gradient set or added to, the pair's gradient added to, and the
// overlapping buffers the front door refuses. Its gradients against finite
// differences are the op table's (tests/model/op_table/elementwise_cases.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {
namespace {

using Vec = std::vector<float>;

Tensor view(Vec& v, int64_t from = 0) {
  return {v.data() + from, DType::f32, int64_t(v.size()) - from};
}

Vec random_vec(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Vec v(n);
  for (float& x : v) x = u(rng);
  return v;
}

void expect_near(const char* what, float got, double want) {
  EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want))) << what;
}

TEST(CpuMixes, ValueEmbedMix) {
  const int rows = 5, cols = 6, col = 4, ld = 13;  // v: columns [4, 10) of rows of 13
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(17);
  CpuOps ops;
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "de +=" : "de =");
    Vec qkv(size_t(rows) * ld, kNaN), dqkv(size_t(rows) * ld, kNaN);
    const Vec v = random_vec(rng, size_t(rows) * cols), g = random_vec(rng, v.size());
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        qkv[size_t(r * ld + col + c)] = v[size_t(r * cols + c)];
        dqkv[size_t(r * ld + col + c)] = g[size_t(r * cols + c)];
      }
    Vec e = random_vec(rng, v.size()), de0 = random_vec(rng, v.size()), de = de0;
    Vec v_in(v.size(), kNaN), w{0.7f, -1.3f}, dw{0.25f, -0.5f};
    ops.value_embed_mix(view(qkv, col), view(v_in), view(e), view(w), rows, cols, ld);
    ops.value_embed_mix_backward(view(dqkv, col), view(de), view(dw), view(v_in), view(e), view(w),
                                 rows, cols, ld, accumulate);
    double dot_v = 0, dot_e = 0;
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < ld; ++c) {
        const size_t iv = size_t(r * ld + c);
        if (c < col || c >= col + cols) {  // not v's: neither read nor written
          EXPECT_TRUE(std::isnan(qkv[iv]) && std::isnan(dqkv[iv])) << r << "," << c;
          continue;
        }
        const size_t i = size_t(r * cols + c - col);
        EXPECT_EQ(v_in[i], v[i]);
        expect_near("v", qkv[iv], 0.7 * v[i] + -1.3 * double(e[i]));
        expect_near("dv", dqkv[iv], 0.7 * g[i]);
        expect_near("de", de[i], (accumulate ? double(de0[i]) : 0.0) + -1.3 * double(g[i]));
        dot_v += double(g[i]) * v[i];
        dot_e += double(g[i]) * e[i];
      }
    expect_near("dw[0]", dw[0], 0.25 + dot_v);
    expect_near("dw[1]", dw[1], -0.5 + dot_e);
  }
  // The outputs may not share memory with what they are computed from.
  Vec big(size_t(rows) * ld), w{1.0f, 1.0f}, dw{0.0f, 0.0f};
  Vec a(size_t(rows) * cols), b(a.size()), c(a.size());
  EXPECT_THROW(ops.value_embed_mix(view(big), view(big, 3), view(a), view(w), rows, cols, ld),
               Error);
  EXPECT_THROW(ops.value_embed_mix(view(big), view(a), view(big, 1), view(w), rows, cols, ld),
               Error);
  EXPECT_THROW(ops.value_embed_mix_backward(view(big), view(a), view(dw), view(big, 2), view(b),
                                            view(w), rows, cols, ld, false),
               Error);
  EXPECT_THROW(ops.value_embed_mix_backward(view(a), view(b), view(dw), view(c), view(b), view(w),
                                            rows, cols, cols, false),
               Error);
  EXPECT_THROW(ops.value_embed_mix_backward(view(big), view(big, 1), view(dw), view(b), view(c),
                                            view(w), rows, cols, ld, false),
               Error);
}

}  // namespace
}  // namespace fsdp
