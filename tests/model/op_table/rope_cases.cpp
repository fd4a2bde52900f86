// The op table's cases for RoPE (see op_table.h): alone, in place, and fused
// with QK-norm (norm_rope), packed or as views into q|k|v rows, and without
// a gain (a model without QK-norm).
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- rope -------------------------------------------------------------------
OpCase rope_case(int B, int T, int H, int hd, const Rope& rope = kTheta) {
  const int64_t n = int64_t(B) * T * H * hd;
  OpCase c;
  c.op = "rope";
  c.shape = fmt("B=%d T=%d heads=%d head_dim=%d", B, T, H, hd);
  c.variant = "in place";
  if (rope.scaling.enabled())
    c.variant += fmt(", theta %g, llama3 scaling %g (low %g, high %g, context %d)", rope.theta,
                     rope.scaling.factor, rope.scaling.low_freq_factor,
                     rope.scaling.high_freq_factor, rope.scaling.original_context);
  c.dtypes = "x bf16";
  c.fwd_bytes = c.bwd_bytes = 2.0 * n * 2;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n);
    Tensor xt = e.in(BF, x);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.rope(xt, B, T, H, hd, rope); };
    b.fwd_checks = {vs_ref("rope", xt, kRound)};
    // Backward runs on forward's output: the inverse rotation must give x back.
    b.bwd = [=, &o] { o.rope_backward(xt, B, T, H, hd, rope); };
    b.bwd_checks = {vs_host("rope then rope_backward", xt, kRound, x),
                    vs_ref("rope_backward", xt, kRound)};
    b.no_gradient = "in place, backward of forward's own output; rope_grad_case differentiates it";
    return b;
  };
  return c;
}

// RoPE as the model differentiates it: forward rotates a copy of x,
// backward rotates a copy of dy back.
OpCase rope_grad_case(int B, int T, int H, int hd) {
  const int64_t n = int64_t(B) * T * H * hd;
  OpCase c;
  c.op = "rope";
  c.shape = fmt("B=%d T=%d heads=%d head_dim=%d", B, T, H, hd);
  c.variant = "of a copy, backward of dy";
  c.dtypes = "x,y,dy,dx bf16";
  c.fwd_bytes = c.bwd_bytes = 2.0 * n * 2;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n), dy = e.rnd(n);
    Tensor xt = e.in(BF, x), y = e.out(BF, n), dyt = e.in(BF, dy), dx = e.out(BF, n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] {
      o.copy(y, xt);
      o.rope(y, B, T, H, hd, kTheta);
    };
    b.fwd_checks = {vs_ref("rope of a copy", y, kRound)};
    b.bwd = [=, &o] {
      o.copy(dx, dyt);
      o.rope_backward(dx, B, T, H, hd, kTheta);
    };
    b.bwd_checks = {vs_ref("rope_backward of dy", dx, kRound)};
    b.loss = {{y, dyt}};
    b.grads = {{"dx", xt, dx}};
    return b;
  };
  return c;
}

// ---- norm_rope ----------------------------------------------------------------
OpCase norm_rope_case(int B, int T, int H, int hd, DType dgt, int64_t ld = 0, int64_t col = 0) {
  const int rows = B * T * H;
  const int64_t n = int64_t(rows) * hd, tokens = int64_t(B) * T, width = int64_t(H) * hd;
  if (ld == 0) ld = width;
  const int64_t wide = tokens * ld;  // x's and dx's buffers
  OpCase c;
  c.op = "norm_rope";
  c.shape = fmt("B=%d T=%d heads=%d head_dim=%d", B, T, H, hd);
  c.variant = std::string("dx set, dg ") + dtype_name(dgt) + ", amax";
  if (ld != width)
    c.variant += fmt(", x and dx rows %lld apart from column %lld", (long long)ld, (long long)col);
  c.dtypes = std::string("x,g,y,dy,dx bf16; rstd f32; dg ") + dtype_name(dgt);
  c.fwd_bytes = 2.0 * n * 2 + 2.0 * hd + 4.0 * rows;
  c.bwd_bytes = 3.0 * n * 2 + 4.0 * rows + 2.0 * hd;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(wide, -2.0f, 2.0f), g = e.rnd(hd, 0.5f, 1.5f), dy = e.rnd(n);
    const auto dg0 = e.rnd(hd), dx0 = e.rnd(wide);
    Tensor xw = e.in(BF, x), gt = e.in(BF, g), y = e.out(BF, n), r = e.out(F32, rows);
    Tensor dyt = e.in(BF, dy), dg = e.in(dgt, dg0);
    // A wide dx starts from the same random values on both sides and is
    // compared whole: a write outside the view (which the reference never
    // makes) would be an error of order 1, far beyond kRound.
    Tensor dxw = ld != width ? e.in(BF, dx0) : e.out(BF, n);
    const Tensor xt = xw.slice(col, wide - col), dx = dxw.slice(col, dxw.numel - col);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.norm_rope(y, r, xt, gt, B, T, H, hd, 1e-5f, kTheta, ld); };
    b.fwd_checks = {vs_ref("norm_rope y", y, kRound), vs_ref("norm_rope rstd (f32)", r, kF32)};
    // Backward from the reference's rstd on both sides, so only backward is
    // judged. dy is not checked: its contents afterwards are unspecified.
    b.from_ref = {r};
    Tensor amax = e.out(F32, 1);
    b.bwd = [=, &o] {
      o.norm_rope_backward(dx, dg, dyt, xt, gt, r, B, T, H, hd, kTheta, amax, ld);
    };
    // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
    b.bwd_checks = {vs_ref("norm_rope dx", dxw, kRound),
                    dgt == BF ? vs_ref("norm_rope dg (bf16, +=)", dg, kRound)
                              : vs_ref("norm_rope dg (f32, +=)", dg, kF32Sum),
                    vs_ref("norm_rope max |dx|", amax, kRound)};
    if (ld == width) {
      b.loss = {{y, dyt}};
      b.grads = {{"dx", xt, dx}, {"dg", gt, dg, /*added=*/true}};
    } else {
      b.no_gradient =
          "views into q|k|v rows: the packed case's gradient, as test_cpu_strided_ops shows";
    }
    return b;
  };
  return c;
}

OpCase rope_rows_case(int B, int T, int H, int hd, int64_t ld = 0, int64_t col = 0) {
  const int rows = B * T * H;
  const int64_t n = int64_t(rows) * hd, tokens = int64_t(B) * T, width = int64_t(H) * hd;
  if (ld == 0) ld = width;
  const int64_t wide = tokens * ld;
  OpCase c;
  c.op = "norm_rope";
  c.shape = fmt("B=%d T=%d heads=%d head_dim=%d", B, T, H, hd);
  c.variant = "no gain (no QK-norm): rotation only";
  if (ld != width)
    c.variant += fmt(", x and dx rows %lld apart from column %lld", (long long)ld, (long long)col);
  c.dtypes = "x,y,dy,dx bf16";
  c.fwd_bytes = c.bwd_bytes = 2.0 * n * 2;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(wide, -2.0f, 2.0f), dy = e.rnd(n), dx0 = e.rnd(wide);
    Tensor xw = e.in(BF, x), y = e.out(BF, n), dyt = e.in(BF, dy);
    // As in norm_rope_case: a wide dx is compared whole, so a write outside
    // the view shows.
    Tensor dxw = ld != width ? e.in(BF, dx0) : e.out(BF, n);
    const Tensor xt = xw.slice(col, wide - col), dx = dxw.slice(col, dxw.numel - col);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.norm_rope(y, {}, xt, {}, B, T, H, hd, 1e-5f, kTheta, ld); };
    b.fwd_checks = {vs_ref("norm_rope (no gain) y", y, kRound)};
    b.bwd = [=, &o] { o.norm_rope_backward(dx, {}, dyt, xt, {}, {}, B, T, H, hd, kTheta, {}, ld); };
    b.bwd_checks = {vs_ref("norm_rope (no gain) dx", dxw, kRound)};
    if (ld == width) {
      b.loss = {{y, dyt}};
      b.grads = {{"dx", xt, dx}};
    } else {
      b.no_gradient =
          "views into q|k|v rows: the packed case's gradient, as test_cpu_strided_ops shows";
    }
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "rope",
    [](std::vector<OpCase>& t) {
      // head_dim 12: the unvectorised path.
      for (int hd : {64, 16, 12}) t.push_back(rope_case(2, 40, 3, hd));
      // Llama 3.1's scaling, with an original context of 64 so that head_dim 64's
      // pairs fall in all three bands (kept, blended, divided by the factor).
      t.push_back(rope_case(2, 40, 3, 64, Rope(500000.0f, {32.0f, 1.0f, 4.0f, 64})));
      t.push_back(rope_grad_case(2, 40, 3, 64));
      // QK-norm + RoPE: head_dim 64 and 128 take the fused kernels, 12 the
      // composition of rmsnorm and rope they fall back to.
      for (int hd : {64, 128, 12}) t.push_back(norm_rope_case(2, 40, 3, hd, BF));
      t.push_back(norm_rope_case(2, 40, 3, 64, F32));
      // More head rows (32768) than the backward's grid holds at once: its
      // blocks loop over rows.
      t.push_back(norm_rope_case(8, 1024, 4, 64, BF));
      // q and k as views into q|k|v rows (3 + 2 * 1 heads): the fused kernels at
      // head_dim 64 and 128, the packed fallback at 12.
      for (int hd : {64, 128, 12}) {
        t.push_back(norm_rope_case(2, 40, 3, hd, BF, 5 * hd, 0));
        t.push_back(norm_rope_case(2, 40, 1, hd, BF, 5 * hd, 3 * hd));
      }
      // Without QK-norm (--qk-norm false, Llama): the rotation alone, packed and
      // from q|k|v rows.
      t.push_back(rope_rows_case(2, 40, 3, 64));
      for (int hd : {64, 128}) {
        t.push_back(rope_rows_case(2, 40, 3, hd, 5 * hd, 0));
        t.push_back(rope_rows_case(2, 40, 1, hd, 5 * hd, 3 * hd));
      }
      // Heads of 128 over d_model 1024 (--head-dim, as Qwen3-0.6B's): q and k
      // inside q|k|v rows 4096 wide.
      const int hd = 128, H = 16, Hkv = 8, qd = H * hd, qkv = qd + 2 * Hkv * hd;
      t.push_back(norm_rope_case(1, 64, H, hd, BF, qkv, 0));
      t.push_back(norm_rope_case(1, 64, Hkv, hd, BF, qkv, qd));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      t.push_back(rope_case(m.B, m.T, c.n_head, c.head_dim()));
      // q, k and v as the model reads them: views into the q|k|v GEMM's output.
      if (c.qk_norm) {
        t.push_back(norm_rope_case(m.B, m.T, c.n_head, c.head_dim(), BF, m.qkv(), 0));
        t.push_back(norm_rope_case(m.B, m.T, c.n_kv_head, c.head_dim(), BF, m.qkv(), c.q_dim()));
      } else {
        t.push_back(rope_rows_case(m.B, m.T, c.n_head, c.head_dim(), m.qkv(), 0));
        t.push_back(rope_rows_case(m.B, m.T, c.n_kv_head, c.head_dim(), m.qkv(), c.q_dim()));
      }
    });

}  // namespace fsdp::test
