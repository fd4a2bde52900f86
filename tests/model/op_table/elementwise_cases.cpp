// The op table's cases for the elementwise ops (see op_table.h): SwiGLU,
// ReLU², the value residual's and a value embedding's mixes, the U-net
// skip's scaled add and the residual add, vectorised and not.
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- swiglu, relu2, value mixes, skip_add and add -----------------------------------
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
    b.loss = {{s, dst}};
    // With halves, a's buffer holds b and da's db: one grad covers both.
    b.grads = {{halves ? "da|db" : "da", at, da}};
    if (!halves) b.grads.push_back({"db", bt, db});
    return b;
  };
  return c;
}

// The ReLU² MLP's activation over W1's packed output.
OpCase relu2_case(int64_t n) {
  OpCase c;
  c.op = "relu2";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = "s = relu(a)^2";
  c.dtypes = "a,s,ds,da bf16";
  c.fwd_bytes = 2.0 * n * 2;
  c.bwd_bytes = 3.0 * n * 2;
  c.bind = [=](Env& e) {
    const auto a = e.rnd(n, -4.0f, 4.0f), ds = e.rnd(n);
    Tensor at = e.in(BF, a), s = e.out(BF, n), dst = e.in(BF, ds);
    Tensor da = e.out(BF, n);
    Ops& o = e.ops;
    Bound b;
    Tensor s_amax = e.out(F32, 1), amax = e.out(F32, 1);
    b.fwd = [=, &o] { o.relu2(s, at, n, s_amax); };
    b.fwd_checks = {vs_ref("relu2", s, kRound), vs_ref("max |s|", s_amax, kRound)};
    b.bwd = [=, &o] { o.relu2_backward(da, dst, at, n, amax); };
    b.bwd_checks = {vs_ref("relu2 da", da, kRound), vs_ref("max |da|", amax, kRound)};
    b.loss = {{s, dst}};
    b.grads = {{"da", at, da}};
    return b;
  };
  return c;
}

// --value-residual's mix on v [rows, cols] inside rows of ld (the v part of
// the q|k|v GEMM's output) and the first block's packed v0. first: v0 = v;
// otherwise v = (v + v0) / 2 in place. The backward runs in place on dv, so
// it starts from a copy of the forward's output gradient (whose other
// columns, left as they are, are exactly the identity's gradient there).
// later: a later block's (accumulate: not the last, adding to dv0).
OpCase value_residual_case(int rows, int cols, int64_t ld, bool first, bool accumulate) {
  const int64_t n = int64_t(rows) * cols, nv = int64_t(rows) * ld;
  OpCase c;
  c.op = "value_residual";
  c.shape = fmt("%dx%d ld=%lld", rows, cols, (long long)ld);
  c.variant = first        ? "first block keeps v0, adds dv0 to dv"
              : accumulate ? "middle block means v with v0, adds to dv0"
                           : "last block means v with v0, sets dv0";
  c.dtypes = "v,v0,dv,dv0 bf16";
  c.fwd_bytes = (first ? 2.0 : 3.0) * n * 2;
  c.bwd_bytes = (accumulate ? 4.0 : 3.0) * n * 2 + 2.0 * nv * 2;  // and the copy of dy
  c.bind = [=](Env& e) {
    const auto v = e.rnd(nv, -2.0f, 2.0f), v0 = e.rnd(n), dy = e.rnd(nv), dy0 = e.rnd(n);
    Tensor vt = e.in(BF, v), dyt = e.in(BF, dy), dv = e.out(BF, nv);
    // first: v0 is the forward's output and dy0 its gradient, which the
    // backward reads as dv0; later: v0 an input, dv0 its gradient (added to
    // what dv0 held with accumulate).
    Tensor v0t = first ? e.out(BF, n) : e.in(BF, v0);
    Tensor dy0t = e.in(BF, dy0), dv0 = first || accumulate ? dy0t : e.out(BF, n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.value_residual(vt, v0t, rows, cols, ld, first); };
    b.fwd_checks = {vs_ref(first ? "v0" : "v", first ? v0t : vt, kRound)};
    b.bwd = [=, &o] {
      o.copy(dv, dyt);
      o.value_residual_backward(dv, dv0, rows, cols, ld, first, accumulate);
    };
    b.bwd_checks = {vs_ref("dv", dv, kRound)};
    if (!first) b.bwd_checks.push_back(vs_ref("dv0", dv0, kRound));
    b.loss = {{vt, dyt}};
    if (first) b.loss.push_back({v0t, dy0t});
    b.grads = {{"dv", vt, dv}};
    if (!first) b.grads.push_back({"dv0", v0t, dv0, accumulate});
    return b;
  };
  return c;
}

// --unet-skips' scaled add x += w s, in place on the stream entering a later
// block (s: its mirror block's input, w: the block's scalar), and its
// backward: ds = w dx, dw += sum(dx s), dx passed on untouched (its gradient
// is dy itself, so a backward that wrote into it fails). misaligned:
// operands at an odd element offset take the unvectorised paths, and dw is
// bf16 (the engine's gathered gradients) instead of f32.
OpCase skip_add_case(int64_t n, bool misaligned) {
  const int64_t m = misaligned ? n - 1 : n, off = misaligned ? 1 : 0;
  OpCase c;
  c.op = "skip_add";
  c.shape = fmt("n=%lld", (long long)m);
  c.variant = misaligned ? "operands at an odd element offset, dw bf16" : "aligned, dw f32";
  c.dtypes = misaligned ? "x,s,w,dx,ds,dw bf16" : "x,s,w,dx,ds bf16; dw f32";
  c.fwd_bytes = 3.0 * m * 2;
  c.bwd_bytes = 3.0 * m * 2;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n, -4.0f, 4.0f), sv = e.rnd(n, -2.0f, 2.0f), dy = e.rnd(n);
    Tensor xt = e.in(BF, x).slice(off, m), st = e.in(BF, sv).slice(off, m);
    Tensor dyt = e.in(BF, dy).slice(off, m), ds = e.out(BF, n).slice(off, m);
    Tensor wt = e.in(BF, {0.75f}), dw = e.in(misaligned ? BF : F32, {0.5f});
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.skip_add(xt, st, wt, m); };
    b.fwd_checks = {vs_ref("x + w s", xt, kRound)};
    b.bwd = [=, &o] { o.skip_add_backward(ds, dw, dyt, st, wt, m); };
    b.bwd_checks = {
        vs_ref("ds", ds, kRound),
        vs_ref(misaligned ? "dw (bf16, +=)" : "dw (f32, +=)", dw, misaligned ? kRound : kF32Sum),
        vs_ref("dx untouched", dyt, kRound)};
    b.loss = {{xt, dyt}};
    b.grads = {{"dx", xt, dyt}, {"ds", st, ds}, {"dw", wt, dw, /*added=*/true}};
    return b;
  };
  return c;
}

// --value-embeds' mix in place on v [rows, cols] inside rows of ld (the q|k|v
// GEMM's output): v_in = v, v = w0 v + w1 e; and its backward, from a copy of
// dy as value_residual_case's: dv = w0 dv, de = (or += with accumulate, a
// table's earlier block) w1 dv, dw += (sum(dv v_in), sum(dv e)). vec: v's
// columns and rows allow 16-byte vectors, dw f32; otherwise dw bf16 (the
// engine's gathered gradients).
OpCase value_embed_mix_case(int rows, int cols, int64_t ld, bool accumulate, bool vec) {
  const int64_t n = int64_t(rows) * cols, nv = int64_t(rows) * ld;
  OpCase c;
  c.op = "value_embed_mix";
  c.shape = fmt("%dx%d ld=%lld", rows, cols, (long long)ld);
  c.variant = std::string(accumulate ? "de added to" : "de set") + (vec ? ", dw f32" : ", dw bf16");
  c.dtypes = vec ? "v,e,w,dv,de bf16; dw f32" : "v,e,w,dv,de,dw bf16";
  c.fwd_bytes = 4.0 * n * 2;
  c.bwd_bytes = (accumulate ? 6.0 : 5.0) * n * 2 + 2.0 * nv * 2;  // and the copy of dy
  c.bind = [=](Env& e) {
    const auto v = e.rnd(nv, -2.0f, 2.0f), ev = e.rnd(n), dy = e.rnd(nv), de0 = e.rnd(n);
    Tensor vt = e.in(BF, v), et = e.in(BF, ev), dyt = e.in(BF, dy), dv = e.out(BF, nv);
    Tensor v_in = e.out(BF, n), de = accumulate ? e.in(BF, de0) : e.out(BF, n);
    Tensor wt = e.in(BF, {0.75f, -1.25f}), dw = e.in(vec ? F32 : BF, {0.5f, -0.25f});
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.value_embed_mix(vt, v_in, et, wt, rows, cols, ld); };
    b.fwd_checks = {vs_ref("w0 v + w1 e", vt, kRound), vs_ref("v_in", v_in, kRound)};
    b.bwd = [=, &o] {
      o.copy(dv, dyt);
      o.value_embed_mix_backward(dv, de, dw, v_in, et, wt, rows, cols, ld, accumulate);
    };
    b.bwd_checks = {vs_ref("dv", dv, kRound), vs_ref(accumulate ? "de (+=)" : "de", de, kRound),
                    vs_ref(vec ? "dw (f32, +=)" : "dw (bf16, +=)", dw, vec ? kF32Sum : kRound)};
    b.loss = {{vt, dyt}};
    b.grads = {{"dv", vt, dv}, {"de", et, de, accumulate}, {"dw", wt, dw, /*added=*/true}};
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

}  // namespace

FSDP_OP_FAMILY(
    "elementwise",
    [](std::vector<OpCase>& t) {
      // a|b in rows: 64 columns vectorised, 37 not.
      t.push_back(swiglu_case(50, 64, true));
      t.push_back(swiglu_case(50, 37, true));
      // n = 1003: a tail that is not a multiple of the vector width.
      for (int64_t n : {int64_t(4096), int64_t(1003)}) {
        t.push_back(swiglu_case(1, int(n), false));
        t.push_back(relu2_case(n));
        t.push_back(add_case(n, false));
        t.push_back(add_case(n, true));
        t.push_back(skip_add_case(n, false));
        t.push_back(skip_add_case(n, true));
      }
      // v inside rows of q|k|v (64 of 128 columns: vectorised; 37 of 93: not).
      for (bool first : {true, false}) t.push_back(value_residual_case(50, 64, 128, first, false));
      t.push_back(value_residual_case(50, 64, 128, false, true));
      t.push_back(value_residual_case(50, 37, 93, false, true));
      for (bool accumulate : {false, true})
        t.push_back(value_embed_mix_case(50, 64, 128, accumulate, true));
      t.push_back(value_embed_mix_case(50, 37, 93, true, false));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      t.push_back(swiglu_case(m.M(), m.c.d_ff, true));
      // At SwiGLU's parameter count: 1.5 d_ff wide.
      t.push_back(relu2_case(int64_t(m.M()) * (3 * int64_t(m.c.d_ff) / 2)));
      t.push_back(add_case(int64_t(m.M()) * m.c.d_model, false));
      t.push_back(skip_add_case(int64_t(m.M()) * m.c.d_model, false));
      t.push_back(value_residual_case(m.M(), m.c.kv_dim(), m.qkv(), false, false));
      t.push_back(value_residual_case(m.M(), m.c.kv_dim(), m.qkv(), false, true));
      t.push_back(value_embed_mix_case(m.M(), m.c.kv_dim(), m.qkv(), true, true));
    });

}  // namespace fsdp::test
