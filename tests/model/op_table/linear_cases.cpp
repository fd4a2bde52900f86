// The op table's cases for the GEMMs (see op_table.h): linear and its
// backward (dx set, added or skipped; dw bf16 or f32), a misaligned weight,
// and linear_add (the residual add in the GEMM's epilogue).
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- linear -----------------------------------------------------------------
enum class LinDx { set, accumulate, skipped };

OpCase linear_case(int M, int N, int K, LinDx mode, DType dwt) {
  const bool acc = mode == LinDx::accumulate;
  OpCase c;
  c.op = "linear";
  c.shape = fmt("M=%d N=%d K=%d", M, N, K);
  c.variant = std::string(mode == LinDx::set          ? "dx set"
                          : mode == LinDx::accumulate ? "dx accumulated"
                                                      : "dx skipped") +
              ", dw " + dtype_name(dwt);
  c.dtypes = std::string("x,w,y,dy,dx bf16; dw ") + dtype_name(dwt);
  c.fwd_flops = 2.0 * M * N * K;
  c.bwd_flops = (mode == LinDx::skipped ? 1 : 2) * c.fwd_flops;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(int64_t(M) * K), w = e.rnd(int64_t(N) * K), dy = e.rnd(int64_t(M) * N);
    const auto dx0 = e.rnd(int64_t(M) * K), dw0 = e.rnd(int64_t(N) * K);
    Tensor xt = e.in(BF, x), wt = e.in(BF, w), y = e.out(BF, int64_t(M) * N);
    Tensor dyt = e.in(BF, dy), dw = e.in(dwt, dw0);
    // An empty dx (numel 0) asks linear_backward to skip the input gradient.
    Tensor dx = mode == LinDx::skipped ? Tensor{nullptr, e.dt(BF), 0}
                : acc                  ? e.in(BF, dx0)
                                       : e.out(BF, int64_t(M) * K);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.linear(y, xt, wt, M, N, K); };
    b.fwd_checks = {vs_ref("linear y", y, kGemm)};
    b.bwd = [=, &o] { o.linear_backward(dx, dw, dyt, xt, wt, M, N, K, acc); };
    if (mode == LinDx::skipped) {
      b.bwd_checks = {vs_ref("linear dw, dx skipped", dw, kGemm)};
    } else {
      b.bwd_checks = {
          vs_ref(acc ? "linear dx (+=)" : "linear dx", dx, kGemm),
          vs_ref(dwt == BF ? "linear dw (bf16, +=)" : "linear dw (f32, +=)", dw, kGemm)};
    }
    b.loss = {{y, dyt}};
    b.grads = {{"dw", wt, dw, /*added=*/true}};
    if (mode != LinDx::skipped) b.grads.push_back({"dx", xt, dx, acc});
    return b;
  };
  return c;
}

// A weight that is a slice at an odd offset of a flat unit (only 2-byte
// aligned), as the FSDP engine's flat parameter buffers can hand out.
OpCase linear_misaligned_case(int M, int N, int K) {
  OpCase c;
  c.op = "linear";
  c.shape = fmt("M=%d N=%d K=%d", M, N, K);
  c.variant = "weight at an odd element offset";
  c.dtypes = "x,w,y bf16";
  c.fwd_flops = 2.0 * M * N * K;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(int64_t(M) * K), flat = e.rnd(1 + int64_t(N) * K);
    Tensor xt = e.in(BF, x), ft = e.in(BF, flat), y = e.out(BF, int64_t(M) * N);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.linear(y, xt, ft.slice(1, int64_t(N) * K), M, N, K); };
    b.fwd_checks = {vs_ref("linear y, misaligned weight", y, kGemm)};
    return b;
  };
  return c;
}

// ---- linear_add ----------------------------------------------------------------
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

}  // namespace

FSDP_OP_FAMILY(
    "linear",
    [](std::vector<OpCase>& t) {
      struct Mnk {
        int M, N, K;
      };
      // 100x72x40: no dimension a multiple of 64; 512x1024x2816: a w2-like shape.
      for (Mnk s : {Mnk{256, 192, 128}, Mnk{100, 72, 40}, Mnk{512, 1024, 2816}}) {
        for (LinDx m : {LinDx::set, LinDx::accumulate})
          for (DType dwt : {BF, F32}) t.push_back(linear_case(s.M, s.N, s.K, m, dwt));
        t.push_back(linear_case(s.M, s.N, s.K, LinDx::skipped, BF));
      }
      t.push_back(linear_misaligned_case(64, 48, 32));
      for (Mnk s : {Mnk{256, 192, 128}, Mnk{100, 72, 40}})
        for (bool alias : {false, true}) t.push_back(linear_add_case(s.M, s.N, s.K, alias));
      // Heads wider than d_model / n_head (--head-dim), as Qwen3-0.6B's: 16 + 2 * 8
      // heads of 128 over d_model 1024, so q|k|v rows are 4096 wide and Wo reads 2048.
      const int d = 1024, qd = 16 * 128, qkv = qd + 2 * 8 * 128;
      t.push_back(linear_case(64, qkv, d, LinDx::set, BF));
      t.back().variant = "wq|wk|wv at head_dim 128, " + t.back().variant;
      t.push_back(linear_case(64, d, qd, LinDx::set, BF));
      t.back().variant = "wo at head_dim 128, " + t.back().variant;
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      const int d = c.d_model;
      struct Proj {
        const char* name;
        int N, K;
      };
      for (Proj p :
           {Proj{"wq|wk|wv", m.qkv(), d}, Proj{"wo", d, c.q_dim()}, Proj{"w1|w3", 2 * c.d_ff, d},
            Proj{"w2", d, c.d_ff}, Proj{"head (padded vocab)", c.padded_vocab(), d}}) {
        t.push_back(linear_case(m.M(), p.N, p.K, LinDx::set, BF));
        t.back().variant = std::string(p.name) + ", " + t.back().variant;
      }
      t.push_back(linear_add_case(m.M(), d, c.d_ff, false));
      t.back().variant = "w2 + residual, " + t.back().variant;
    });

}  // namespace fsdp::test
