// The op table's cases for the fused ops (see op_cases.h): a GEMM with the
// residual add in its epilogue, and QK-norm with RoPE. Each is checked
// against the CPU reference, which composes the unfused ops.
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
