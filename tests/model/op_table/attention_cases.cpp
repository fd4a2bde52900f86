// The op table's cases for attention (see op_table.h): cuDNN's fused causal
// GQA forward and backward against the CPU reference's, with v packed or as
// the last columns of q|k|v rows, as the model reads it.
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- attention --------------------------------------------------------------
OpCase attention_case(int B, int T, int H, int Hkv, int hd, int64_t v_ld = 0) {
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
    if (v_ld == kv_width) {
      b.loss = {{out, dot}};
      b.grads = {{"dq", qt, dq}, {"dk", kt, dk}, {"dv", vt, dv}};
    } else {
      b.no_gradient =
          "v a view into q|k|v rows: the packed case's gradient, as test_cpu_strided_ops shows";
    }
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "attention",
    [](std::vector<OpCase>& t) {
      // Grouped (4:2, 8:2) and plain (4:4) heads; head_dim 64, 16, 128.
      t.push_back(attention_case(2, 128, 4, 2, 64));
      t.push_back(attention_case(1, 64, 4, 4, 16));
      t.push_back(attention_case(2, 96, 8, 2, 128));
      // v inside a q|k|v row (4 + 2 * 2 heads of 64), and at gpt-350m's heads
      // (16 + 2 * 4 of 64): v's rows (q+2kv wide) are not k's (kv wide).
      t.push_back(attention_case(2, 128, 4, 2, 64, 8 * 64));
      t.push_back(attention_case(1, 256, 16, 4, 64, 24 * 64));
      // Heads wider than d_model / n_head (--head-dim), as Qwen3-0.6B's: 16 + 2 * 8
      // heads of 128, so q|k|v rows are 4096 wide.
      t.push_back(attention_case(1, 64, 16, 8, 128, 4096));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      t.push_back(attention_case(m.B, m.T, c.n_head, c.n_kv_head, c.head_dim(), m.qkv()));
    });

}  // namespace fsdp::test
