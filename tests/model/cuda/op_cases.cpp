// The op table (see op_cases.h): one builder per op, then the list of cases.
// A builder's bind lambda must draw its random inputs in a fixed order and
// never branch on the backend, so both backends see the same inputs. The
// fused and elementwise ops' builders (RoPE, SwiGLU, add) are in fused_op_cases.cpp.
#include "tests/model/cuda/op_cases.h"

#include <cctype>
#include <limits>
#include <utility>

#include "model/params.h"
#include "tests/model/cuda/op_case_util.h"

namespace fsdp::test {
namespace {

// ---- embedding --------------------------------------------------------------
// few_tokens: only 10 distinct ids (0, 7, ..., 63), so the backward's
// scatter-add has many rows colliding on one dwte row.
OpCase embedding_case(int V, int n, int C, DType dwt, bool few_tokens) {
  FSDP_CHECK(!few_tokens || V > 63);
  OpCase c;
  c.op = "embedding";
  c.shape = fmt("V=%d n=%d C=%d", V, n, C);
  c.variant = std::string("dwte ") + dtype_name(dwt) + (few_tokens ? ", 10 distinct tokens" : "");
  c.dtypes = std::string("wte,out,dout bf16; tokens i32; dwte ") + dtype_name(dwt);
  c.fwd_bytes = 2.0 * n * C * 2 + 4.0 * n;  // read n rows, write them, read the ids
  c.bwd_bytes = 2.0 * n * C + 2.0 * n * C * double(dtype_size(dwt)) + 4.0 * n;
  c.bind = [=](Env& e) {
    std::uniform_int_distribution<int> pick(0, few_tokens ? 9 : V - 1);
    std::vector<int32_t> tok(static_cast<size_t>(n));
    for (auto& t : tok) t = few_tokens ? pick(e.rng) * 7 : pick(e.rng);
    const auto w = e.rnd(int64_t(V) * C), d = e.rnd(int64_t(n) * C), dw0 = e.rnd(int64_t(V) * C);
    Tensor tt = e.tokens(tok), wt = e.in(BF, w), out = e.out(BF, int64_t(n) * C);
    Tensor dout = e.in(BF, d), dw = e.in(dwt, dw0);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.embedding(out, tt, wt, n, C); };
    b.fwd_checks = {vs_ref("embedding out (a gather is exact)", out, kBitwise)};
    b.bwd = [=, &o] { o.embedding_backward(dw, dout, tt, n, C); };
    b.bwd_checks = {dwt == BF ? vs_ref("embedding dwte (bf16, +=)", dw, kRound)
                              : vs_ref("embedding dwte (f32, +=)", dw, kF32Exact)};
    return b;
  };
  return c;
}

// ---- rmsnorm ----------------------------------------------------------------
enum class RmsDx { set, accumulate, alias_dy };

OpCase rmsnorm_case(int rows, int dim, RmsDx mode) {
  const int64_t n = int64_t(rows) * dim;
  const bool acc = mode == RmsDx::accumulate;
  OpCase c;
  c.op = "rmsnorm";
  c.shape = fmt("rows=%d dim=%d", rows, dim);
  // The FP8 model asks a block's norms for max |y| (its h1, h2) and max |dx|
  // (its dres); the aliasing variant keeps the kernels' paths without.
  c.variant = mode == RmsDx::set          ? "dx set, dg bf16, amax"
              : mode == RmsDx::accumulate ? "dx accumulated, dg bf16, amax"
                                          : "dx aliasing dy, dg f32";
  c.dtypes =
      mode == RmsDx::alias_dy ? "x,g,y,dy,dx bf16; rstd,dg f32" : "x,g,y,dy,dx,dg bf16; rstd f32";
  c.fwd_bytes = 2.0 * n * 2 + 2.0 * dim + 4.0 * rows;
  c.bwd_bytes = (acc ? 4.0 : 3.0) * n * 2 + 4.0 * rows + 2.0 * dim;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n, -2.0f, 2.0f), g = e.rnd(dim, 0.5f, 1.5f), dy = e.rnd(n);
    const auto dx0 = e.rnd(n), dg0 = e.rnd(dim);
    Tensor xt = e.in(BF, x), gt = e.in(BF, g), y = e.out(BF, n), r = e.out(F32, rows);
    Tensor dyt = e.in(BF, dy);
    Tensor dg = e.in(mode == RmsDx::alias_dy ? F32 : BF, dg0);
    Tensor dx = mode == RmsDx::alias_dy ? dyt : acc ? e.in(BF, dx0) : e.out(BF, n);
    const Tensor no_amax{nullptr, e.dt(F32), 0};
    const Tensor y_amax = mode == RmsDx::alias_dy ? no_amax : e.out(F32, 1);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.rmsnorm(y, r, xt, gt, rows, dim, 1e-5f, y_amax); };
    b.fwd_checks = {vs_ref("rmsnorm y", y, kRound), vs_ref("rmsnorm rstd (f32)", r, kF32)};
    // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
    if (mode != RmsDx::alias_dy) b.fwd_checks.push_back(vs_ref("rmsnorm max |y|", y_amax, kRound));
    // Backward from the reference's rstd on both sides, so only backward is judged.
    b.from_ref = {r};
    const Tensor amax = mode == RmsDx::alias_dy ? no_amax : e.out(F32, 1);
    b.bwd = [=, &o] { o.rmsnorm_backward(dx, dg, dyt, xt, gt, r, rows, dim, acc, amax); };
    if (mode == RmsDx::alias_dy)
      b.bwd_checks = {vs_ref("rmsnorm dx aliasing dy", dx, kRound),
                      vs_ref("rmsnorm dg (f32, +=)", dg, kF32Sum)};
    else
      // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
      b.bwd_checks = {vs_ref(acc ? "rmsnorm dx (+=)" : "rmsnorm dx", dx, kRound),
                      vs_ref("rmsnorm dg (bf16, +=)", dg, kRound),
                      vs_ref("rmsnorm max |dx|", amax, kRound)};
    return b;
  };
  return c;
}

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

// ---- cross-entropy ------------------------------------------------------------
// Targets are random in [0, V); with n > 20, rows 3 and 20 are ignored
// (targets -1 and -100) and must give loss 0 exactly. grad_scale 0 asks for
// losses only: the logits must come back untouched.
OpCase cross_entropy_case(int n, int V, int Vp, float grad_scale) {
  OpCase c;
  c.op = "cross_entropy";
  c.shape = fmt("n=%d V=%d Vp=%d", n, V, Vp);
  c.variant =
      grad_scale == 0.0f ? "losses only" : fmt("losses and dlogits in place, scale %g", grad_scale);
  c.dtypes = "logits bf16; targets i32; losses f32";
  // Read the logits once, and write the gradient over them when asked.
  c.fwd_bytes = (grad_scale == 0.0f ? 1.0 : 2.0) * double(n) * Vp * 2 + 8.0 * n;
  c.bind = [=](Env& e) {
    std::uniform_int_distribution<int> pick(0, V - 1);
    std::vector<int32_t> tg(static_cast<size_t>(n));
    for (auto& t : tg) t = pick(e.rng);
    const bool ignored = n > 20;
    if (ignored) {
      tg[3] = -1;
      tg[20] = -100;
    }
    const auto logits = e.rnd(int64_t(n) * Vp, -6.0f, 6.0f);
    Tensor lt = e.in(BF, logits), loss = e.out(F32, n), tt = e.tokens(tg);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.cross_entropy(loss, lt, tt, n, V, Vp, grad_scale); };
    b.fwd_checks = {vs_ref("cross_entropy losses (f32)", loss, kF32)};
    if (ignored) {
      b.fwd_checks.push_back(vs_host("loss of ignored target -1", loss.slice(3, 1), kBitwise, {0}));
      b.fwd_checks.push_back(
          vs_host("loss of ignored target -100", loss.slice(20, 1), kBitwise, {0}));
    }
    if (grad_scale == 0.0f)
      b.fwd_checks.push_back(vs_host("logits untouched (no gradient)", lt, kBitwise, logits));
    else
      b.fwd_checks.push_back(vs_ref("cross_entropy dlogits (in place)", lt, kRound));
    return b;
  };
  return c;
}

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

std::vector<float> Env::rnd(int64_t n, float lo, float hi) {
  const int64_t fresh = fresh_limit > 0 && fresh_limit < n ? fresh_limit : n;
  std::vector<float> v = random_bf16(rng, fresh, lo, hi);
  v.resize(size_t(n));
  for (int64_t i = fresh; i < n; ++i) v[size_t(i)] = v[size_t(i - fresh)];
  return v;
}

Tensor Env::out(DType d, int64_t n) {
  Tensor t = pool.make(dt(d), n);
  poison(ops, t);
  return t;
}

void run_parity(
    const Bound& r, const Bound& d, Ops& ref, Ops& dev,
    const std::function<void(const std::vector<Check>&, const std::vector<Check>&)>& compare) {
  FSDP_CHECK(r.fwd && d.fwd && bool(r.bwd) == bool(d.bwd) &&
                 r.from_ref.size() == d.from_ref.size() && r.from_dev.size() == d.from_dev.size(),
             "the case bound different calls on the two backends");
  r.fwd();
  d.fwd();
  compare(r.fwd_checks, d.fwd_checks);
  if (!d.bwd) return;
  for (size_t i = 0; i < d.from_ref.size(); ++i)
    upload(dev, d.from_ref[i], download(ref, r.from_ref[i]));
  for (size_t i = 0; i < d.from_dev.size(); ++i)
    upload(ref, r.from_dev[i], download(dev, d.from_dev[i]));
  r.bwd();
  d.bwd();
  compare(r.bwd_checks, d.bwd_checks);
}

std::string OpCase::name() const {
  std::string s;
  for (char ch : op + " " + shape + " " + variant) {
    if (ch == '=') continue;  // "M=256" -> "M256"
    if (std::isalnum(static_cast<unsigned char>(ch)))
      s += ch;
    else if (!s.empty() && s.back() != '_')
      s += '_';
  }
  while (!s.empty() && s.back() == '_') s.pop_back();
  return s;
}

std::vector<OpCase> op_cases() {
  std::vector<OpCase> t;
  // C = 36: the unvectorised path.
  for (int C : {64, 1024, 36})
    for (DType dwt : {BF, F32}) t.push_back(embedding_case(97, 300, C, dwt, true));

  // dim 40 and 16: not multiples of the vector width.
  for (auto [rows, dim] :
       {std::pair{300, 64}, std::pair{64, 1024}, std::pair{1000, 16}, std::pair{50, 40}})
    for (RmsDx m : {RmsDx::set, RmsDx::accumulate, RmsDx::alias_dy})
      t.push_back(rmsnorm_case(rows, dim, m));
  // The backward kernel's other paths, each with more rows than its grid
  // holds at once (rows per block loop): d_model 1024 keeps a row in
  // registers, 2048 reads it twice with dg in registers, 4096 keeps dg in
  // shared memory (and halves the row groups per block to fit).
  for (auto [rows, dim] : {std::pair{4500, 1024}, std::pair{4500, 2048}, std::pair{2500, 4096}})
    for (RmsDx m : {RmsDx::accumulate, RmsDx::alias_dy}) t.push_back(rmsnorm_case(rows, dim, m));

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

  // head_dim 12: the unvectorised path.
  for (int hd : {64, 16, 12}) t.push_back(rope_case(2, 40, 3, hd));
  // Llama 3.1's scaling, with an original context of 64 so that head_dim 64's
  // pairs fall in all three bands (kept, blended, divided by the factor).
  t.push_back(rope_case(2, 40, 3, 64, Rope(500000.0f, {32.0f, 1.0f, 4.0f, 64})));
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

  // n = 100003: odd, so no kernel can assume a multiple of its vector width.
  for (Fp8 f : {Fp8::e4m3, Fp8::e5m2})
    for (DType src : {F32, BF}) t.push_back(quantize_fp8_case(100003, f, src));
  t.push_back(quantize_fp8_case(1000, Fp8::e4m3, BF, /*zeros=*/true));
  // 300 and 77 rows (not multiples of 16): the 32 x 32 kernel; 320 and 96:
  // the vectorised 64 x 64 one, with partial tiles in both directions.
  t.push_back(quantize_fp8_t_case(300, 200, Fp8::e4m3, BF));
  t.push_back(quantize_fp8_t_case(77, 1030, Fp8::e5m2, F32));
  t.push_back(quantize_fp8_t_case(320, 200, Fp8::e4m3, BF));
  t.push_back(quantize_fp8_t_case(96, 1032, Fp8::e5m2, F32));
  for (bool t_only : {true, false}) {
    t.push_back(quantize_fp8_t_amax_case(320, 200, BF, t_only));   // 64 x 64 tiles
    t.push_back(quantize_fp8_t_amax_case(77, 1030, F32, t_only));  // 32 x 32
  }
  t.push_back(fp8_gather_cast_case(300, 200));
  t.push_back(fp8_gather_cast_case(320, 200));    // the 64 x 64 transpose, partial tiles
  t.push_back(fp8_gather_cast_case(1024, 4096));  // gpt-350m's w2
  t.push_back(fp8_each_case());
  // e4m3 x e4m3 (forward) and an e5m2 operand (backward's gradients).
  t.push_back(linear_fp8_case(256, 192, 128, Fp8::e4m3, Fp8::e4m3));
  t.push_back(linear_fp8_case(128, 64, 320, Fp8::e5m2, Fp8::e4m3));
  t.push_back(linear_fp8_case(256, 192, 128, Fp8::e4m3, Fp8::e4m3, /*residual=*/true));
  t.push_back(linear_backward_fp8_case(256, 192, 128, false, F32));
  t.push_back(linear_backward_fp8_case(128, 64, 320, true, BF));

  // Grouped (4:2, 8:2) and plain (4:4) heads; head_dim 64, 16, 128.
  t.push_back(attention_case(2, 128, 4, 2, 64));
  t.push_back(attention_case(1, 64, 4, 4, 16));
  t.push_back(attention_case(2, 96, 8, 2, 128));
  // v inside a q|k|v row (4 + 2 * 2 heads of 64), and at gpt-350m's heads
  // (16 + 2 * 4 of 64): v's rows (q+2kv wide) are not k's (kv wide).
  t.push_back(attention_case(2, 128, 4, 2, 64, 8 * 64));
  t.push_back(attention_case(1, 256, 16, 4, 64, 24 * 64));
  // Heads wider than d_model / n_head (--head-dim), as Qwen3-0.6B's: 16 + 2 * 8
  // heads of 128 over d_model 1024, so q|k|v rows are 4096 wide and Wo reads 2048.
  {
    const int hd = 128, H = 16, Hkv = 8, d = 1024, qd = H * hd, qkv = qd + 2 * Hkv * hd;
    t.push_back(norm_rope_case(1, 64, H, hd, BF, qkv, 0));
    t.push_back(norm_rope_case(1, 64, Hkv, hd, BF, qkv, qd));
    t.push_back(attention_case(1, 64, H, Hkv, hd, qkv));
    t.push_back(linear_case(64, qkv, d, LinDx::set, BF));
    t.back().variant = "wq|wk|wv at head_dim 128, " + t.back().variant;
    t.push_back(linear_case(64, d, qd, LinDx::set, BF));
    t.back().variant = "wo at head_dim 128, " + t.back().variant;
  }

  // a|b in rows: 64 columns vectorised, 37 not.
  t.push_back(swiglu_case(50, 64, true));
  t.push_back(swiglu_case(50, 37, true));
  // n = 1003: a tail that is not a multiple of the vector width.
  for (int64_t n : {int64_t(4096), int64_t(1003)}) {
    t.push_back(swiglu_case(1, int(n), false));
    t.push_back(add_case(n, false));
    t.push_back(add_case(n, true));
  }

  // (V, Vp): unpadded, and a vocabulary padded as ModelConfig::padded_vocab
  // pads it (50257 -> 50304), whose padding columns must not count.
  for (auto [V, Vp] : {std::pair{50304, 50304}, std::pair{1003, 1003}, std::pair{50257, 50304},
                       std::pair{1003, 1024}})
    for (float scale : {0.0f, 1.0f / 64}) t.push_back(cross_entropy_case(37, V, Vp, scale));

  // n = 100003: odd, so every vectorised kernel has a tail.
  const int64_t n = 100003;
  t.push_back(cast_case(n));
  for (DType src : {BF, F32}) t.push_back(accumulate_case(n, src));
  t.push_back(sum_squares_case(n));
  t.push_back(sum_squares_each_case(n));
  t.push_back(adamw_case(n));
  add_muon_cases(t, n);
  return t;
}

std::vector<OpCase> model_op_cases(const ModelConfig& c, int B, int T) {
  const int M = B * T, d = c.d_model;
  std::vector<OpCase> t;
  t.push_back(embedding_case(c.vocab_size, M, d, BF, false));
  t.push_back(rmsnorm_case(M, d, RmsDx::set));
  t.push_back(rmsnorm_case(M, d, RmsDx::accumulate));  // a block's norms
  struct Proj {
    const char* name;
    int N, K;
  };
  const int qkv = c.q_dim() + 2 * c.kv_dim();
  for (Proj p : {Proj{"wq|wk|wv", qkv, d}, Proj{"wo", d, c.q_dim()}, Proj{"w1|w3", 2 * c.d_ff, d},
                 Proj{"w2", d, c.d_ff}, Proj{"head (padded vocab)", c.padded_vocab(), d}}) {
    t.push_back(linear_case(M, p.N, p.K, LinDx::set, BF));
    t.back().variant = std::string(p.name) + ", " + t.back().variant;
  }
  t.push_back(linear_add_case(M, d, c.d_ff, false));
  t.back().variant = "w2 + residual, " + t.back().variant;
  // The same block projections as FP8 GEMMs (issue 13's forward), and the
  // per-tensor cast of an activation that feeds them.
  for (Proj p : {Proj{"wq|wk|wv", qkv, d}, Proj{"wo", d, c.q_dim()}, Proj{"w1|w3", 2 * c.d_ff, d},
                 Proj{"w2", d, c.d_ff}}) {
    t.push_back(linear_fp8_case(M, p.N, p.K, Fp8::e4m3, Fp8::e4m3));
    t.back().variant = std::string(p.name) + ", " + t.back().variant;
    t.push_back(linear_backward_fp8_case(M, p.N, p.K, false, F32));
    t.back().variant = std::string(p.name) + ", " + t.back().variant;
  }
  t.push_back(linear_fp8_case(M, d, c.d_ff, Fp8::e4m3, Fp8::e4m3, /*residual=*/true));
  t.back().variant = "w2, " + t.back().variant;
  t.push_back(quantize_fp8_case(int64_t(M) * d, Fp8::e4m3, BF));
  t.push_back(quantize_fp8_t_case(M, d, Fp8::e4m3, BF));
  t.push_back(quantize_fp8_t_case(M, c.d_ff, Fp8::e4m3, BF));
  // A block input's cast in training: codes for the forward GEMM and the
  // transposed codes the backward keeps (h1 and h2; s); s's transposed codes
  // alone under --recompute mlp.
  t.push_back(quantize_fp8_t_amax_case(M, d, BF, /*t_only=*/false));
  t.push_back(quantize_fp8_t_amax_case(M, c.d_ff, BF, /*t_only=*/false));
  t.push_back(quantize_fp8_t_amax_case(M, c.d_ff, BF, /*t_only=*/true));
  // The packed gradients: dA|dB by SwiGLU's amax, dq|dk|dv by its own.
  t.push_back(quantize_fp8_t_amax_case(M, 2 * c.d_ff, BF, /*t_only=*/false));
  t.push_back(quantize_fp8_t_case(M, qkv, Fp8::e4m3, BF));
  t.push_back(rope_case(B, T, c.n_head, c.head_dim()));
  // q, k and v as the model reads them: views into the q|k|v GEMM's output.
  if (c.qk_norm) {
    t.push_back(norm_rope_case(B, T, c.n_head, c.head_dim(), BF, qkv, 0));
    t.push_back(norm_rope_case(B, T, c.n_kv_head, c.head_dim(), BF, qkv, c.q_dim()));
  } else {
    t.push_back(rope_rows_case(B, T, c.n_head, c.head_dim(), qkv, 0));
    t.push_back(rope_rows_case(B, T, c.n_kv_head, c.head_dim(), qkv, c.q_dim()));
  }
  t.push_back(attention_case(B, T, c.n_head, c.n_kv_head, c.head_dim(), qkv));
  t.push_back(swiglu_case(M, c.d_ff, true));
  t.push_back(add_case(int64_t(M) * d, false));
  t.push_back(cross_entropy_case(M, c.vocab_size, c.padded_vocab(), 1.0f / float(M)));
  // The optimizer and engine ops on one transformer block's parameters.
  const int64_t block = model_units(c).at(1).numel();
  t.push_back(cast_case(block));
  t.push_back(accumulate_case(block, BF));
  t.push_back(sum_squares_case(block));
  t.push_back(adamw_case(block));
  add_muon_model_cases(t, c, block);
  return t;
}

}  // namespace fsdp::test
