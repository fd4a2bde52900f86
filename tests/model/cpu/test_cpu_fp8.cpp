// The CPU reference's FP8 quantization (Ops::quantize_fp8) against what the
// recipe promises: the largest magnitude lands on the format's largest
// value, every element is within half an FP8 step of its scaled value, and
// zeros, NaN and infinities do what the interface says.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {
namespace {

struct Quantized {
  std::vector<uint8_t> q;
  float scale_inv = 0;
  std::vector<float> back;  // dequantized, f32
};

Quantized run(const std::vector<float>& x, Fp8 f, DType src = DType::f32) {
  CpuOps ops;
  const auto n = int64_t(x.size());
  Tensor xt = ops.alloc(src, n), q = ops.alloc(DType::u8, n), si = ops.alloc(DType::f32, 1);
  Tensor back = ops.alloc(DType::f32, n);
  if (src == DType::bf16) {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = f32_to_bf16(x[i]);
    ops.to_device(xt, b.data());
  } else {
    ops.to_device(xt, x.data());
  }
  ops.quantize_fp8(q, si, xt, f);
  ops.dequantize_fp8(back, q, si, f);
  Quantized r;
  r.q.resize(x.size());
  r.back.resize(x.size());
  ops.to_host(r.q.data(), q);
  ops.to_host(&r.scale_inv, si);
  ops.to_host(r.back.data(), back);
  for (Tensor t : {xt, q, si, back}) ops.free(t);
  return r;
}

TEST(CpuFp8, ScaledToTheFormatAndWithinHalfAStep) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    const Fp8Spec s = fp8_spec(f);
    std::vector<float> x(4096);
    for (auto& v : x) v = normal(rng) * 0.02f;  // weight-like magnitudes
    x[17] = -0.3f;                              // the amax, negative
    const Quantized r = run(x, f);
    EXPECT_FLOAT_EQ(r.scale_inv, 0.3f / s.max) << fp8_name(f);
    EXPECT_EQ(r.q[17], 0x80 | s.max_code) << fp8_name(f);
    EXPECT_NEAR(r.back[17], -0.3f, 0.3f * 1e-6f);
    // Normal FP8 numbers have mant_bits bits after the point: the rounding
    // error is at most half of 2^-mant_bits relative; subnormals, half of
    // the smallest subnormal (times scale_inv) absolute.
    const float rel = std::ldexp(1.0f, -s.mant_bits - 1);
    const float abs_sub = fp8_to_f32(0x01, f) / 2 * r.scale_inv;
    int subnormal = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float err = std::fabs(r.back[i] - x[i]);
      EXPECT_LE(err, std::fmax(rel * std::fabs(x[i]), abs_sub) * (1 + 1e-6f))
          << fp8_name(f) << " x=" << x[i] << " back=" << r.back[i];
      subnormal += (r.q[i] & 0x7f) != 0 && (r.q[i] & 0x7f) < (1 << s.mant_bits);
    }
    if (f == Fp8::e4m3) {
      EXPECT_GT(subnormal, 0) << "the data should reach the subnormals";
    }
  }
}

TEST(CpuFp8, BfloatSourceGivesTheSameCodes) {
  std::vector<float> x(1000);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-5.0f, 5.0f);
  for (auto& v : x) v = bf16_to_f32(f32_to_bf16(u(rng)));  // representable in both
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2}) {
    const Quantized a = run(x, f, DType::f32), b = run(x, f, DType::bf16);
    EXPECT_EQ(a.q, b.q);
    EXPECT_EQ(a.scale_inv, b.scale_inv);
  }
}

TEST(CpuFp8, ZerosNanAndInfinity) {
  const Quantized z = run(std::vector<float>(64, 0.0f), Fp8::e4m3);
  EXPECT_EQ(z.scale_inv, 1.0f);  // nothing to scale by
  for (uint8_t c : z.q) EXPECT_EQ(c, 0);
  // NaN takes no part in amax and stays NaN; the rest is scaled as usual.
  const Quantized n = run({1.0f, NAN, -2.0f}, Fp8::e4m3);
  EXPECT_EQ(n.scale_inv, 2.0f / 448.0f);
  EXPECT_EQ(n.q[1], 0x7f);
  EXPECT_EQ(n.q[2], 0xfe);
  EXPECT_EQ(n.back[0], 1.0f);
  // An infinity makes amax infinite: no finite scale, so 1, and it saturates.
  const Quantized i = run({1.0f, INFINITY, -1e6f}, Fp8::e5m2);
  EXPECT_EQ(i.scale_inv, 1.0f);
  EXPECT_EQ(i.q[0], 0x3c);
  EXPECT_EQ(i.q[1], 0x7b);
  EXPECT_EQ(i.q[2], 0xfb);
}

// An FP8 linear approximates the f32 one to FP8's precision: a code is off
// by at most 2^-(p+1) relative (p mantissa bits; e4m3 3, e5m2 2), so each
// product by at most the sum of its operands' bounds, and so is the relative
// L2 of the result (the errors of K products partly cancel; it stays below).
// A missing or doubled scale misses by orders of magnitude.
TEST(CpuFp8, LinearOnCodesApproximatesLinear) {
  CpuOps ops;
  const int M = 32, N = 48, K = 64;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(M) * K), w(size_t(N) * K);
  for (auto& v : x) v = normal(rng) * 3.0f;
  for (auto& v : w) v = normal(rng) * 0.02f;
  Tensor xt = ops.alloc(DType::f32, M * K), wt = ops.alloc(DType::f32, N * K);
  ops.to_device(xt, x.data());
  ops.to_device(wt, w.data());
  Tensor xq = ops.alloc(DType::u8, M * K), wq = ops.alloc(DType::u8, N * K);
  Tensor xs = ops.alloc(DType::f32, 1), ws = ops.alloc(DType::f32, 1);
  Tensor y = ops.alloc(DType::f32, M * N), y8 = ops.alloc(DType::f32, M * N);
  ops.linear(y, xt, wt, M, N, K);
  for (Fp8 xf : {Fp8::e4m3, Fp8::e5m2}) {
    ops.quantize_fp8(xq, xs, xt, xf);
    ops.quantize_fp8(wq, ws, wt, Fp8::e4m3);
    ops.linear_fp8(y8, {xq, xs, xf}, {wq, ws, Fp8::e4m3}, {}, M, N, K);
    double num = 0, den = 0;
    for (int64_t i = 0; i < int64_t(M) * N; ++i) {
      const double d = double(y8.f32()[i]) - y.f32()[i];
      num += d * d;
      den += double(y.f32()[i]) * y.f32()[i];
    }
    const double bound = std::ldexp(1.0, -fp8_spec(xf).mant_bits - 1) +
                         std::ldexp(1.0, -fp8_spec(Fp8::e4m3).mant_bits - 1);
    EXPECT_LT(std::sqrt(num / den), bound) << "x " << fp8_name(xf);
    EXPECT_GT(std::sqrt(num / den), 0.0) << "FP8 rounding leaves some error";
  }
  for (Tensor t : {xt, wt, xq, wq, xs, ws, y, y8}) ops.free(t);
}

double rel_l2(const float* got, const float* want, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// The backward on codes (x, w e4m3, dy e5m2, from quantize_fp8_t) against
// the f32 backward, within the same per-element bound as the forward's.
TEST(CpuFp8, LinearBackwardOnCodesApproximatesLinearBackward) {
  CpuOps ops;
  const int M = 32, N = 48, K = 64;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto tensor = [&](int64_t n, float scale) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = normal(rng) * scale;
    Tensor t = ops.alloc(DType::f32, n);
    ops.to_device(t, v.data());
    return t;
  };
  Tensor x = tensor(M * K, 3.0f), w = tensor(N * K, 0.02f), dy = tensor(M * N, 1e-4f);
  auto codes = [&](Tensor t, int rows, int cols, Fp8 f) {
    Tensor q = ops.alloc(DType::u8, t.numel), qt = ops.alloc(DType::u8, t.numel);
    Tensor s = ops.alloc(DType::f32, 1);
    ops.quantize_fp8_t(q, qt, s, t, rows, cols, f);
    return std::pair{Fp8Tensor{q, s, f}, Fp8Tensor{qt, s, f}};
  };
  const auto [xq, xt] = codes(x, M, K, Fp8::e4m3);
  const auto [wq, wt] = codes(w, N, K, Fp8::e4m3);
  const auto [g, gt] = codes(dy, M, N, Fp8::e5m2);
  Tensor dx = ops.alloc(DType::f32, M * K), dw = ops.alloc(DType::f32, N * K);
  Tensor dx8 = ops.alloc(DType::f32, M * K), dw8 = ops.alloc(DType::f32, N * K);
  ops.zero(dw);
  ops.zero(dw8);
  ops.linear_backward(dx, dw, dy, x, w, M, N, K, false);
  ops.linear_backward_fp8(dx8, dw8, g, gt, xt, wt, M, N, K, false);
  const double bound = std::ldexp(1.0, -3) + std::ldexp(1.0, -4);  // e5m2 and e4m3 operands
  const double ex = rel_l2(dx8.f32(), dx.f32(), M * K), ew = rel_l2(dw8.f32(), dw.f32(), N * K);
  EXPECT_LT(ex, bound);
  EXPECT_LT(ew, bound);
  EXPECT_GT(ex, 0.0);
  EXPECT_GT(ew, 0.0);
  // Skipping dx leaves it alone and still adds the same dw again.
  ops.linear_backward_fp8(Tensor{nullptr, DType::f32, 0}, dw8, g, gt, xt, wt, M, N, K, false);
  std::vector<float> twice(dw8.f32(), dw8.f32() + N * K);
  for (auto& v : twice) v /= 2;
  EXPECT_LT(rel_l2(twice.data(), dw.f32(), N * K), bound);
  for (Tensor t : {x, w, dy, dx, dw, dx8, dw8, xq.codes, xt.codes, wq.codes, wt.codes, g.codes,
                   gt.codes, xq.scale_inv, wq.scale_inv, g.scale_inv})
    ops.free(t);
}

// The transposed copy holds the same codes as quantize_fp8's, transposed.
TEST(CpuFp8, CastTransposeIsTheCastTransposed) {
  CpuOps ops;
  const int rows = 5, cols = 7;
  std::vector<float> x(rows * cols);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(float(i) - 17.0f, -int(i % 5));
  Tensor xt = ops.alloc(DType::f32, rows * cols), si = ops.alloc(DType::f32, 1);
  Tensor q = ops.alloc(DType::u8, rows * cols), q2 = ops.alloc(DType::u8, rows * cols);
  Tensor qt = ops.alloc(DType::u8, rows * cols);
  ops.to_device(xt, x.data());
  ops.quantize_fp8(q, si, xt, Fp8::e4m3);
  ops.quantize_fp8_t(q2, qt, si, xt, rows, cols, Fp8::e4m3);
  const auto* a = static_cast<const uint8_t*>(q.data);
  const auto* b = static_cast<const uint8_t*>(q2.data);
  const auto* t = static_cast<const uint8_t*>(qt.data);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      EXPECT_EQ(b[r * cols + c], a[r * cols + c]);
      EXPECT_EQ(t[c * rows + r], a[r * cols + c]) << r << "," << c;
    }
  EXPECT_THROW(ops.quantize_fp8_t(q2, qt, si, xt, rows + 1, cols, Fp8::e4m3), Error);
  for (Tensor z : {xt, si, q, q2, qt}) ops.free(z);
}

// The engine's FP8 gather casts a weight in slices with one agreed amax: the
// amax of the slices' amaxes, then each slice cast by it, must be the whole
// tensor's quantize_fp8 bit for bit; transpose_fp8 moves codes only.
TEST(CpuFp8, SlicesCastWithTheSharedAmaxAreTheWholeCast) {
  CpuOps ops;
  const int rows = 6, cols = 9, n = rows * cols;
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = std::ldexp(float(i % 11) - 5.5f, -(i % 7));
  x[40] = 7.25f;  // the amax, in the last slice
  Tensor xt = ops.alloc(DType::f32, n), whole = ops.alloc(DType::u8, n),
         si = ops.alloc(DType::f32, 1);
  ops.to_device(xt, x.data());
  ops.quantize_fp8(whole, si, xt, Fp8::e4m3);

  Tensor amax = ops.alloc(DType::f32, 3), part = ops.alloc(DType::u8, n);
  Tensor si_part = ops.alloc(DType::f32, 1);
  const int64_t cuts[4] = {0, 20, 20, n};  // one slice is empty, as a rank's can be
  for (int k = 0; k < 3; ++k) ops.amax(amax.slice(k, 1), xt.slice(cuts[k], cuts[k + 1] - cuts[k]));
  EXPECT_EQ(amax.f32()[1], 0.0f);  // empty
  EXPECT_EQ(amax.f32()[2], 7.25f);
  float agreed = 0;
  for (int k = 0; k < 3; ++k) agreed = std::max(agreed, amax.f32()[k]);
  Tensor a{&agreed, DType::f32, 1};
  for (int k = 0; k < 3; ++k) {
    const int64_t len = cuts[k + 1] - cuts[k];
    si_part.f32()[0] = -1;
    ops.quantize_fp8_amax(part.slice(cuts[k], len), si_part, xt.slice(cuts[k], len), a, Fp8::e4m3);
    EXPECT_EQ(si_part.f32()[0], si.f32()[0]) << "slice " << k;  // written even when empty
  }
  EXPECT_EQ(std::memcmp(part.data, whole.data, size_t(n)), 0);

  Tensor t = ops.alloc(DType::u8, n);
  ops.transpose_fp8(t, whole, rows, cols);
  const auto* w = static_cast<const uint8_t*>(whole.data);
  const auto* tt = static_cast<const uint8_t*>(t.data);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(tt[c * rows + r], w[r * cols + c]) << r << "," << c;
  EXPECT_THROW(ops.transpose_fp8(t, whole, rows + 1, cols), Error);
  for (Tensor z : {xt, whole, si, amax, part, si_part, t}) ops.free(z);
}

// NaN does not count toward the amax, as in quantize_fp8.
TEST(CpuFp8, AmaxSkipsNan) {
  CpuOps ops;
  std::vector<float> x = {1.0f, NAN, -3.5f, 2.0f};
  float m = -1;
  ops.amax(Tensor{&m, DType::f32, 1}, Tensor{x.data(), DType::f32, 4});
  EXPECT_EQ(m, 3.5f);
}

TEST(CpuFp8, RefusesWrongTypes) {
  CpuOps ops;
  Tensor x = ops.alloc(DType::f32, 8), q = ops.alloc(DType::f32, 8), si = ops.alloc(DType::f32, 1);
  EXPECT_THROW(ops.quantize_fp8(q, si, x, Fp8::e4m3), Error);  // q must be u8
  for (Tensor t : {x, q, si}) ops.free(t);
}

}  // namespace
}  // namespace fsdp
