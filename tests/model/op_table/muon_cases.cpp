// The op table's cases for Muon's ops (see op_table.h): the momentum and the
// update over a shard's spans and NorMuon's row scaling (fp32 in and out, so
// checked tight), and
// Newton-Schulz, which the CUDA backend runs in bf16 against the reference's
// fp32. Its tolerances come from measurements, not from what passes:
// PyTorch's bf16 matmuls on the CPU (fp32 accumulation, bf16 outputs, as
// cuBLASLt computes them) against fp32, on uniform random matrices of these
// shapes and the model's, 64x96 to 2816x1024
// (bench/optim/newton_schulz_bf16_error.py).
#include <algorithm>

#include "shard/muon.h"
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

inline constexpr Tol kNewtonSchulz0{
    4e-3,
    "no step: the normalised matrix rounded once to bf16 (measured 1.5e-3 to 1.8e-3); a wrong "
    "norm or orientation is an error of order 1"};
inline constexpr Tol kNewtonSchulz1{
    5e-3,
    "one step: bf16 input and three bf16 GEMM outputs (measured 2.3e-3 to 2.5e-3); no step at "
    "all is 0.7 away"};
inline constexpr Tol kNewtonSchulz5{
    3e-2,
    "five bf16 steps, each multiplying earlier rounding by its slope at zero (3.4, or 8.2 to "
    "2.3 under polar_express) on the small singular values (measured 0.9e-2 to 1.6e-2 under "
    "either table); four steps instead are 0.28 or more away, the second coefficient off by "
    "1.5% 0.11 (0.17 under polar_express)"};

Tol ns_tol(int steps) {
  return steps == 0 ? kNewtonSchulz0 : steps == 1 ? kNewtonSchulz1 : kNewtonSchulz5;
}

// Spans as a unit's shard holds Muon matrices: apart, of uneven sizes, with
// elements of other parameters between them (which must stay as they are).
std::vector<MuonSpan> shard_spans(int64_t n) {
  const int64_t q = n / 5;
  return {{7, q, 1.0f}, {q + 100, 2 * q, 0.5f}, {3 * q + 200, n - 3 * q - 333, 2.0f}};
}

}  // namespace

namespace {

OpCase muon_momentum_case(int64_t n, bool nesterov) {
  OpCase c;
  c.op = "muon_momentum";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = std::string("3 spans, grad scale 0.7, ") + (nesterov ? "nesterov" : "plain");
  c.dtypes = "grad,buf f32";
  c.fwd_bytes = 16.0 * n;  // read and write both
  c.bind = [=](Env& e) {
    const auto g = e.rnd(n), m = e.rnd(n, -0.1f, 0.1f);
    Tensor gt = e.in(F32, g), mt = e.in(F32, m);
    const std::vector<MuonSpan> spans = shard_spans(n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.muon_momentum(gt, mt, spans, 0.95f, nesterov, 0.7f); };
    b.fwd_checks = {vs_ref("muon_momentum direction", gt, kF32Exact),
                    vs_ref("muon_momentum buf", mt, kF32Exact)};
    return b;
  };
  return c;
}

OpCase muon_update_case(int64_t n) {
  OpCase c;
  c.op = "muon_update";
  c.shape = fmt("n=%lld", (long long)n);
  c.variant = "3 spans (lr scale 1, 0.5, 2), weight decay 0.1";
  c.dtypes = "param,update f32";
  c.fwd_bytes = 12.0 * n;
  c.bind = [=](Env& e) {
    const auto p = e.rnd(n), u = e.rnd(n);
    Tensor pt = e.in(F32, p), ut = e.in(F32, u);
    const std::vector<MuonSpan> spans = shard_spans(n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.muon_update(pt, ut, spans, 0.02f, 0.1f); };
    b.fwd_checks = {vs_ref("muon_update param", pt, kF32Exact),
                    vs_host("muon_update update untouched", ut, kBitwise, u)};
    return b;
  };
  return c;
}

OpCase newton_schulz_case(int rows, int cols, int batch, int steps,
                          MuonNsCoefficients table = MuonNsCoefficients::jordan) {
  const int64_t n = int64_t(rows) * cols;
  const double m = std::min(rows, cols), w = std::max(rows, cols);
  OpCase c;
  c.op = "newton_schulz";
  c.shape = fmt("%d x %d x %d", batch, rows, cols);
  c.variant = fmt("%d steps%s%s", steps,
                  table == MuonNsCoefficients::polar_express ? " of polar_express" : "",
                  rows > cols ? ", tall (iterated transposed)" : "");
  c.dtypes = "x,out f32 (bf16 inside on the GPU)";
  c.fwd_flops = batch * steps * (4 * m * m * w + 2 * m * m * m);
  c.fwd_bytes = steps == 0 ? 8.0 * n * batch : 0;
  c.bind = [=](Env& e) {
    std::vector<Tensor> xs, outs;
    std::vector<std::vector<float>> inputs;
    for (int i = 0; i < batch; ++i) {
      inputs.push_back(e.rnd(n));
      xs.push_back(e.in(F32, inputs.back()));
      outs.push_back(e.out(F32, n));
    }
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.newton_schulz(outs, xs, rows, cols, muon_newton_schulz(steps, table)); };
    for (int i = 0; i < batch; ++i) {
      b.fwd_checks.push_back(
          vs_ref(fmt("newton_schulz out %d", i), outs[size_t(i)], ns_tol(steps)));
      b.fwd_checks.push_back(vs_host(fmt("newton_schulz x %d untouched", i), xs[size_t(i)],
                                     kBitwise, inputs[size_t(i)]));
    }
    return b;
  };
  return c;
}

// NorMuon: the owner's row mean squares of an orthogonalised update, and a
// rank's slice scaled by the rows' factors (fp32 throughout, double sums on
// both backends: checked tight).
OpCase row_mean_squares_case(int rows, int cols) {
  const int64_t n = int64_t(rows) * cols;
  OpCase c;
  c.op = "row_mean_squares";
  c.shape = fmt("%d x %d", rows, cols);
  c.dtypes = "x,out f32";
  c.fwd_bytes = 4.0 * (n + rows);
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n);
    Tensor xt = e.in(F32, x), out = e.out(F32, rows);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.row_mean_squares(out, xt, rows, cols); };
    b.fwd_checks = {vs_ref("row_mean_squares out", out, kF32Exact),
                    vs_host("row_mean_squares x untouched", xt, kBitwise, x)};
    return b;
  };
  return c;
}

OpCase normuon_scale_case(int rows, int cols, int64_t first, int64_t count) {
  OpCase c;
  c.op = "normuon_scale";
  c.shape = fmt("%d x %d", rows, cols);
  c.variant = fmt("elements %lld + %lld, beta2 0.95", (long long)first, (long long)count);
  c.dtypes = "x,stats f32";
  c.fwd_bytes = 8.0 * count + 16.0 * rows;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(count);
    // Mean squares and old moments of an orthogonalised update's size
    // (about 1 / max(rows, cols)), one row's moment still 0.
    std::vector<float> stats = e.rnd(2 * int64_t(rows), 1e-4f, 2e-3f);
    stats[size_t(rows)] = 0;
    Tensor xt = e.in(F32, x), st = e.in(F32, stats);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.normuon_scale(xt, first, count, st, rows, cols, 0.95f, kNorMuonEps); };
    b.fwd_checks = {vs_ref("normuon_scale x", xt, kF32Exact),
                    vs_ref("normuon_scale factors, moments", st, kF32Exact)};
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "muon",
    [](std::vector<OpCase>& t) {
      const int64_t n = 100003;
      for (bool nesterov : {true, false}) t.push_back(muon_momentum_case(n, nesterov));
      t.push_back(muon_update_case(n));
      // Wide and tall (iterated transposed), square, leading dimensions that are
      // not multiples of 8, batches of one and more; 0 and 1 steps judge the
      // casts and one step's three GEMMs tightly, 5 the published iteration.
      for (auto [rows, cols] : {std::pair{64, 96}, std::pair{96, 64}}) {
        t.push_back(newton_schulz_case(rows, cols, 1, 0));
        t.push_back(newton_schulz_case(rows, cols, 3, 1));
        t.push_back(newton_schulz_case(rows, cols, 2, 5));
      }
      t.push_back(newton_schulz_case(128, 128, 1, 5));
      t.push_back(newton_schulz_case(50, 70, 3, 5));
      t.push_back(newton_schulz_case(160, 48, 1, 1));
      // Polar Express: a quintic per step and the norm's 1% margin, past its
      // table (6 steps) too.
      const auto polar = MuonNsCoefficients::polar_express;
      t.push_back(newton_schulz_case(64, 96, 2, 5, polar));
      t.push_back(newton_schulz_case(96, 64, 1, 5, polar));
      t.push_back(newton_schulz_case(50, 70, 3, 6, polar));
      // NorMuon: rows of a few to thousands of elements; a whole matrix and
      // a rank's slice that starts and ends inside rows.
      t.push_back(row_mean_squares_case(37, 23));
      t.push_back(row_mean_squares_case(300, 2000));
      t.push_back(normuon_scale_case(37, 23, 0, 37 * 23));
      t.push_back(normuon_scale_case(1500, 700, 12345, 400000));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      const int64_t block = m.block;
      const int d = c.d_model;
      // Muon on one block: its matrices batched by shape as MuonStep batches them
      // on one rank (wq and wo; wk and wv; w1 and w3; w2 alone).
      t.push_back(muon_momentum_case(block, true));
      t.push_back(muon_update_case(block));
      if (c.q_dim() == d) {
        t.push_back(newton_schulz_case(d, d, 2, 5));
        t.back().variant = "wq and wo, " + t.back().variant;
      } else {
        t.push_back(newton_schulz_case(c.q_dim(), d, 1, 5));
        t.back().variant = "wq, " + t.back().variant;
        t.push_back(newton_schulz_case(d, c.q_dim(), 1, 5));
        t.back().variant = "wo, " + t.back().variant;
      }
      t.push_back(newton_schulz_case(c.kv_dim(), d, 2, 5));
      t.back().variant = "wk and wv, " + t.back().variant;
      t.push_back(newton_schulz_case(c.d_ff, d, 2, 5));
      t.back().variant = "w1 and w3, " + t.back().variant;
      t.push_back(newton_schulz_case(d, c.d_ff, 1, 5));
      t.back().variant = "w2, " + t.back().variant;
      t.push_back(newton_schulz_case(c.d_ff, d, 2, 5, MuonNsCoefficients::polar_express));
      t.back().variant = "w1 and w3, " + t.back().variant;
      t.push_back(row_mean_squares_case(c.d_ff, d));
      t.back().variant = "w1";
      t.push_back(normuon_scale_case(c.d_ff, d, 0, int64_t(c.d_ff) * d));
      t.back().variant = "w1, " + t.back().variant;
    });

}  // namespace fsdp::test
