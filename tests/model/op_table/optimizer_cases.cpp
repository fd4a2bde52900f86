// The op table's cases for the optimizer and engine ops (see op_table.h):
// casts, gradient accumulation, sums of squares, AdamW over spans.
#include <limits>
#include <memory>

#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- optimizer and engine -------------------------------------------------------
// Values scaled by 1.0001 so most are not bf16-representable.
std::vector<float> not_bf16(std::vector<float> v) {
  for (auto& x : v) x *= 1.0001f;
  return v;
}

OpCase cast_case(int64_t n) {
  OpCase c;
  c.op = "cast";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = "f32 to bf16 and back";
  c.dtypes = "f32 -> bf16 -> f32";
  c.fwd_bytes = 2.0 * n * (4 + 2);
  c.bind = [=](Env& e) {
    const auto xf = not_bf16(e.rnd(n, -3.0f, 3.0f));
    std::vector<float> want(xf.size());
    for (size_t i = 0; i < xf.size(); ++i) want[i] = round_bf16(xf[i]);
    Tensor f = e.in(F32, xf), h = e.out(BF, n), back = e.out(F32, n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] {
      o.cast(h, f);
      o.cast(back, h);
    };
    // The round trip must be exactly round-to-nearest-even to bf16.
    b.fwd_checks = {vs_host("cast f32 -> bf16 -> f32", back, kBitwise, std::move(want))};
    return b;
  };
  return c;
}

OpCase accumulate_case(int64_t n, DType src) {
  OpCase c;
  c.op = "accumulate";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = std::string("src ") + dtype_name(src) + ", scale 0.5";
  c.dtypes = std::string("dst f32, src ") + dtype_name(src);
  c.fwd_bytes = double(n) * (8 + double(dtype_size(src)));
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n, -3.0f, 3.0f), acc0 = e.rnd(n);
    Tensor d = e.in(F32, acc0), s = e.in(src, x);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.accumulate(d, s, 0.5f); };
    b.fwd_checks = {vs_ref(std::string("accumulate (src ") + dtype_name(src) + ")", d, kF32Exact)};
    return b;
  };
  return c;
}

OpCase sum_squares_case(int64_t n) {
  OpCase c;
  c.op = "sum_squares";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = "result on the host";
  c.dtypes = "x f32; result double";
  c.fwd_bytes = 4.0 * n;
  c.bind = [=](Env& e) {
    const auto xf = not_bf16(e.rnd(n, -3.0f, 3.0f));
    Tensor x = e.in(F32, xf);
    auto result = std::make_shared<double>(std::numeric_limits<double>::quiet_NaN());
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { *result = o.sum_squares(x); };
    Check ck;
    ck.what = "sum_squares";
    ck.tol = kSumSq;
    ck.scalar = [result] { return *result; };
    b.fwd_checks = {ck};
    return b;
  };
  return c;
}

// The engine's optimizer call: three spans with their own decay and gaps
// between them (padding, untouched), the bf16 all-gather copy and the
// cleared gradient, three steps.
// The gradient norm's per-unit sums, left on the device for one read: three
// tensors of different lengths and an empty one.
OpCase sum_squares_each_case(int64_t n) {
  OpCase c;
  c.op = "sum_squares_each";
  c.shape = fmt("n=%lld, %lld, 0, 7", (long long)n, (long long)(n / 3 + 1));
  c.variant = "f32 results on the device";
  c.dtypes = "x f32; out f32";
  c.fwd_bytes = 4.0 * (n + n / 3 + 1 + 7);
  c.bind = [=](Env& e) {
    std::vector<Tensor> xs = {e.in(F32, not_bf16(e.rnd(n, -3.0f, 3.0f))),
                              e.in(F32, not_bf16(e.rnd(n / 3 + 1, -0.5f, 0.5f))),
                              e.in(F32, std::vector<float>{}), e.in(F32, e.rnd(7))};
    Tensor out = e.out(F32, 4);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.sum_squares_each(out, xs); };
    b.fwd_checks = {vs_ref("sum_squares_each", out, kF32Exact)};
    return b;
  };
  return c;
}

OpCase adamw_case(int64_t n) {
  constexpr int kSteps = 3;  // bias correction differs per step
  OpCase c;
  c.op = "adamw";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = "3 spans (decay 0.1, 0, 0.1), 3 steps, grad scale 0.7, bf16 copy, clears grad";
  c.dtypes = "param,grad,exp_avg,exp_avg_sq f32; send bf16";
  // per step: read p, g, m, v; write p, m, v, the bf16 copy and g
  c.fwd_bytes = kSteps * (7.0 * 4 + 2 + 4) * n;
  c.bind = [=](Env& e) {
    const auto p = e.rnd(n), g = e.rnd(n), m = e.rnd(n, -0.1f, 0.1f), v = e.rnd(n, 0.0f, 0.01f);
    Tensor pt = e.in(F32, p), gt = e.in(F32, g), mt = e.in(F32, m), vt = e.in(F32, v);
    Tensor st = e.out(BF, n);
    const int64_t q = n / 4;
    const std::vector<AdamWSpan> spans = {
        {0, q, 0.1f}, {q + 64, q, 0.0f}, {2 * q + 128, n - 2 * q - 192, 0.1f}};
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] {
      for (int step = 1; step <= kSteps; ++step)
        o.adamw(pt, gt, mt, vt, st, spans, {1e-3f, 0.9f, 0.95f, 1e-8f, 0.7f, step}, step == kSteps);
    };
    b.fwd_checks = {vs_ref("adamw param", pt, kF32Exact), vs_ref("adamw exp_avg", mt, kF32Exact),
                    vs_ref("adamw exp_avg_sq", vt, kF32Exact),
                    vs_ref("adamw send (bf16)", st, kRound),
                    vs_ref("adamw grad (cleared)", gt, kF32Exact)};
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "optimizer",
    [](std::vector<OpCase>& t) {
      // n = 100003: odd, so every vectorised kernel has a tail.
      const int64_t n = 100003;
      t.push_back(cast_case(n));
      for (DType src : {BF, F32}) t.push_back(accumulate_case(n, src));
      t.push_back(sum_squares_case(n));
      t.push_back(sum_squares_each_case(n));
      t.push_back(adamw_case(n));
    },
    // The optimizer and engine ops on one transformer block's parameters.
    [](std::vector<OpCase>& t, const ModelShape& m) {
      t.push_back(cast_case(m.block));
      t.push_back(accumulate_case(m.block, BF));
      t.push_back(sum_squares_case(m.block));
      t.push_back(adamw_case(m.block));
    });

}  // namespace fsdp::test
