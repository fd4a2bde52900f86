// The op table's cases for attention (see op_cases.h): cuDNN's fused causal
// GQA forward and backward against the CPU reference's, with v packed or as
// the last columns of q|k|v rows, as the model reads it.
#include "tests/model/cuda/op_case_util.h"

namespace fsdp::test {

// ---- attention --------------------------------------------------------------
OpCase attention_case(int B, int T, int H, int Hkv, int hd, int64_t v_ld) {
  const int64_t nq = int64_t(B) * T * H * hd, nkv = int64_t(B) * T * Hkv * hd;
  const int64_t nl = int64_t(B) * H * T, kv_width = int64_t(Hkv) * hd;
  if (v_ld == 0) v_ld = kv_width;
  // A strided v is the last columns of rows v_ld wide, as in the q|k|v GEMM's output.
  const int64_t nv = int64_t(B) * T * v_ld, vcol = v_ld - kv_width;
  OpCase c;
  c.op = "attention";
  c.shape = fmt("B=%d T=%d heads=%d kv_heads=%d head_dim=%d", B, T, H, Hkv, hd);
  c.variant =
      v_ld == kv_width ? "causal" : fmt("causal, v and dv rows %lld apart", (long long)v_ld);
  c.dtypes = "q,k,v,out,dout,dq,dk,dv bf16; lse f32";
  // Causal: half of the T x T scores; forward 2 matmuls, backward 5.
  c.fwd_flops = 4.0 * B * H * double(T) * T * hd / 2;
  c.bwd_flops = 2.5 * c.fwd_flops;
  c.bind = [=](Env& e) {
    const auto q = e.rnd(nq, -2.0f, 2.0f), k = e.rnd(nkv, -2.0f, 2.0f), v = e.rnd(nv);
    const auto dout = e.rnd(nq), dv0 = e.rnd(nv);
    Tensor qt = e.in(BF, q), kt = e.in(BF, k), vw = e.in(BF, v);
    Tensor out = e.out(BF, nq), lse = e.out(F32, nl);
    Tensor dot = e.in(BF, dout), dq = e.out(BF, nq), dk = e.out(BF, nkv);
    // A wide dv starts from the same values on both sides and is compared
    // whole, so a write outside its view would show as an error of order 1.
    Tensor dvw = v_ld != kv_width ? e.in(BF, dv0) : e.out(BF, nkv);
    const Tensor vt = vw.slice(vcol, nv - vcol), dv = dvw.slice(vcol, dvw.numel - vcol);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.attention(out, lse, qt, kt, vt, B, T, H, Hkv, hd, v_ld); };
    b.fwd_checks = {vs_ref("attention out", out, kAttn), vs_ref("attention lse (f32)", lse, kF32)};
    // Backward from the same forward on both sides: the device's bf16 out and
    // its lse, given to the reference as well.
    b.from_dev = {out, lse};
    b.bwd = [=, &o] {
      o.attention_backward(dq, dk, dv, dot, out, lse, qt, kt, vt, B, T, H, Hkv, hd, v_ld);
    };
    b.bwd_checks = {vs_ref("attention dq", dq, kAttn), vs_ref("attention dk", dk, kAttn),
                    vs_ref("attention dv", dvw, kAttn)};
    return b;
  };
  return c;
}

}  // namespace fsdp::test
