// The op table's cases for the fused and elementwise ops (see op_cases.h): a
// GEMM with the residual add in its epilogue, RoPE alone and with QK-norm,
// SwiGLU and the residual add. Each is checked against the CPU reference,
// which composes the unfused ops.
#include "tests/model/cuda/op_case_util.h"

namespace fsdp::test {

// ---- linear_add ---------------------------------------------------------------
OpCase linear_add_case(int M, int N, int K, bool alias) {
  OpCase c;
  c.op = "linear_add";
  c.shape = fmt("M=%d N=%d K=%d", M, N, K);
  c.variant = alias ? "r aliases y (residual in place)" : "r separate";
  c.dtypes = "x,w,r,y bf16";
  c.fwd_flops = 2.0 * M * N * K;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(int64_t(M) * K), w = e.rnd(int64_t(N) * K);
    const auto r = e.rnd(int64_t(M) * N, -4.0f, 4.0f);
    Tensor xt = e.in(BF, x), wt = e.in(BF, w), rt = e.in(BF, r);
    Tensor y = alias ? rt : e.out(BF, int64_t(M) * N);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.linear_add(y, xt, wt, rt, M, N, K); };
    b.fwd_checks = {vs_ref(alias ? "linear_add y, r aliasing y" : "linear_add y", y, kGemm)};
    if (!alias) b.fwd_checks.push_back(vs_host("linear_add r untouched", rt, kBitwise, r));
    return b;
  };
  return c;
}

// ---- rope -------------------------------------------------------------------
OpCase rope_case(int B, int T, int H, int hd, const Rope& rope) {
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
    return b;
  };
  return c;
}

// ---- swiglu and add -----------------------------------------------------------
// halves: a and b side by side in rows of 2 * cols (the W1|W3 GEMM's output),
// da and db likewise; otherwise each packed.
OpCase swiglu_case(int rows, int cols, bool halves) {
  const int64_t n = int64_t(rows) * cols, ld = halves ? 2 * cols : cols;
  OpCase c;
  c.op = "swiglu";
  c.shape = fmt("%dx%d", rows, cols);
  c.variant = halves ? "s = silu(a) * b, a|b in one row" : "s = silu(a) * b";
  c.dtypes = "a,b,s,ds,da,db bf16";
  c.fwd_bytes = 3.0 * n * 2;
  c.bwd_bytes = 5.0 * n * 2;
  c.bind = [=](Env& e) {
    const auto a = e.rnd(halves ? 2 * n : n, -4.0f, 4.0f), bv = e.rnd(n), ds = e.rnd(n);
    // With halves, a holds both: its rows' second halves are b.
    Tensor at = e.in(BF, a), bt = halves ? at.slice(cols, 2 * n - cols) : e.in(BF, bv);
    Tensor s = e.out(BF, n), dst = e.in(BF, ds);
    Tensor da = e.out(BF, halves ? 2 * n : n);
    Tensor db = halves ? da.slice(cols, 2 * n - cols) : e.out(BF, n);
    Ops& o = e.ops;
    Bound b;
    Tensor s_amax = e.out(F32, 1), amax = e.out(F32, 1);
    b.fwd = [=, &o] { o.swiglu(s, at, bt, rows, cols, ld, s_amax); };
    // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
    b.fwd_checks = {vs_ref("swiglu", s, kRound), vs_ref("max |s|", s_amax, kRound)};
    b.bwd = [=, &o] { o.swiglu_backward(da, db, dst, at, bt, rows, cols, ld, amax); };
    b.bwd_checks = {vs_ref(halves ? "swiglu da|db" : "swiglu da", da, kRound),
                    vs_ref("max of |da|, |db|", amax, kRound)};
    if (!halves) b.bwd_checks.push_back(vs_ref("swiglu db", db, kRound));
    return b;
  };
  return c;
}

// misaligned: operands at an odd element offset take the unvectorised path;
// otherwise in place (y aliases a), as the model's residual adds call it.
OpCase add_case(int64_t n, bool misaligned) {
  const int64_t m = misaligned ? n - 1 : n;
  OpCase c;
  c.op = "add";
  c.shape = fmt("n=%lld", (long long)m);
  c.variant = misaligned ? "operands at an odd element offset" : "in place, y aliases a";
  c.dtypes = "a,b,y bf16";
  c.fwd_bytes = 3.0 * m * 2;
  c.bind = [=](Env& e) {
    const auto a = e.rnd(n, -4.0f, 4.0f), bv = e.rnd(n);
    Tensor at = e.in(BF, a), bt = e.in(BF, bv);
    Ops& o = e.ops;
    Bound b;
    if (misaligned) {
      Tensor y = e.out(BF, n).slice(1, m);
      b.fwd = [=, &o] { o.add(y, at.slice(1, m), bt.slice(1, m), m); };
      b.fwd_checks = {vs_ref("add (misaligned)", y, kRound)};
    } else {
      b.fwd = [=, &o] { o.add(at, at, bt, n); };
      b.fwd_checks = {vs_ref("add (in place)", at, kRound)};
    }
    return b;
  };
  return c;
}

// ---- norm_rope ----------------------------------------------------------------
OpCase norm_rope_case(int B, int T, int H, int hd, DType dgt, int64_t ld, int64_t col) {
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
    return b;
  };
  return c;
}

OpCase rope_rows_case(int B, int T, int H, int hd, int64_t ld, int64_t col) {
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
    return b;
  };
  return c;
}

}  // namespace fsdp::test
