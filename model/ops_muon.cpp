// Ops' front door for the Muon optimizer's ops (shard/muon.h runs them): the
// momentum and the update are elementwise over a shard's spans, the
// Newton-Schulz iteration is a few GEMMs on one whole matrix, and NorMuon's
// row statistics and scaling are a row reduction and an elementwise pass.
#include "model/op_checks.h"

namespace fsdp {

using namespace op_checks;

namespace {
// Sorted, disjoint and inside a shard of n: each element is updated once.
void check_spans(const std::vector<MuonSpan>& spans, int64_t n, const char* op) {
  int64_t done = 0;
  for (const MuonSpan& sp : spans) {
    FSDP_CHECK(sp.begin >= done && sp.count >= 0 && sp.begin + sp.count <= n, op,
               " spans must be sorted, disjoint and inside the shard of ", n);
    done = sp.begin + sp.count;
  }
}
int64_t span_elems(const std::vector<MuonSpan>& spans) {
  int64_t n = 0;
  for (const MuonSpan& sp : spans) n += sp.count;
  return n;
}
}  // namespace

void Ops::muon_momentum(Tensor grad_t, Tensor buf, const std::vector<MuonSpan>& spans,
                        float momentum, bool nesterov, float grad_scale) {
  const int64_t n = grad_t.numel;
  f32(grad_t, n, "muon_momentum grad");
  f32(buf, n, "muon_momentum buf");
  FSDP_CHECK(momentum >= 0 && momentum < 1, "muon_momentum: momentum ", momentum,
             " is outside [0, 1)");
  check_spans(spans, n, "muon_momentum");
  const OpScope scope(hook_, [&] {
    return OpCall{key("muon_momentum", {n}), 0, 16.0 * double(span_elems(spans))};
  });
  do_muon_momentum(grad_t, buf, spans, momentum, nesterov, grad_scale);
}

void Ops::newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                        int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  FSDP_CHECK(rows > 0 && cols > 0, "newton_schulz of a ", rows, " x ", cols, " matrix");
  FSDP_CHECK(ns.steps >= 0 && ns.eps > 0 && ns.norm_scale > 0, "newton_schulz: steps ", ns.steps,
             ", eps ", ns.eps, ", norm scale ", ns.norm_scale);
  FSDP_CHECK(ns.steps == 0 || !ns.quintics.empty(), "newton_schulz: ", ns.steps,
             " steps and no quintic");
  FSDP_CHECK(!xs.empty() && outs.size() == xs.size(), "newton_schulz of ", xs.size(),
             " matrices into ", outs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    f32(outs[i], rows * cols, "newton_schulz out");
    f32(xs[i], rows * cols, "newton_schulz x");
  }
  // The first rows x cols floats of each are what the op reads or writes.
  const int64_t n = rows * cols;
  for (size_t i = 0; i < outs.size(); ++i) {
    for (size_t j = 0; j < xs.size(); ++j)
      FSDP_CHECK(!overlap(outs[i], xs[j], n), "newton_schulz: out ", i, " overlaps x ", j);
    for (size_t j = 0; j < i; ++j)
      FSDP_CHECK(!overlap(outs[i], outs[j], n), "newton_schulz: out ", i, " overlaps out ", j);
  }
  const OpScope scope(hook_, [&] {
    // per step, on the wide orientation (m <= n): X X^T 2m^2n, A A 2m^3, B X 2m^2n
    const double m = double(std::min(rows, cols)), w = double(std::max(rows, cols));
    return OpCall{key("newton_schulz", {int64_t(xs.size()), rows, cols}),
                  double(xs.size()) * ns.steps * (4 * m * m * w + 2 * m * m * m), 0};
  });
  do_newton_schulz(outs, xs, rows, cols, ns);
}

void Ops::muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans, float lr,
                      float weight_decay) {
  const int64_t n = param.numel;
  f32(param, n, "muon_update param");
  f32(update, n, "muon_update update");
  check_spans(spans, n, "muon_update");
  const OpScope scope(hook_, [&] {
    return OpCall{key("muon_update", {n}), 0, 12.0 * double(span_elems(spans))};
  });
  do_muon_update(param, update, spans, lr, weight_decay);
}

void Ops::row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols) {
  FSDP_CHECK(rows > 0 && cols > 0, "row_mean_squares of a ", rows, " x ", cols, " matrix");
  f32(out, rows, "row_mean_squares out");
  f32(x, rows * cols, "row_mean_squares x");
  FSDP_CHECK(!overlap(out, rows, x, rows * cols), "row_mean_squares: out overlaps x");
  const OpScope scope(hook_, [&] {
    return OpCall{key("row_mean_squares", {rows, cols}), 2.0 * double(rows * cols),
                  4.0 * double(rows * cols + rows)};
  });
  do_row_mean_squares(out, x, rows, cols);
}

void Ops::normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                        int64_t cols, float beta2, float eps) {
  FSDP_CHECK(rows > 0 && cols > 0, "normuon_scale of a ", rows, " x ", cols, " matrix");
  FSDP_CHECK(first >= 0 && count >= 0 && first + count <= rows * cols, "normuon_scale: elements ",
             first, " + ", count, " of a ", rows, " x ", cols, " matrix");
  FSDP_CHECK(beta2 >= 0 && beta2 < 1 && eps > 0, "normuon_scale: beta2 ", beta2, ", eps ", eps);
  f32(x, count, "normuon_scale x");
  f32(stats, 2 * rows, "normuon_scale stats");
  FSDP_CHECK(!overlap(x, count, stats, 2 * rows), "normuon_scale: x overlaps stats");
  const OpScope scope(hook_, [&] {
    return OpCall{key("normuon_scale", {rows, cols, count}), double(count) + 8.0 * double(rows),
                  8.0 * double(count) + 16.0 * double(rows)};
  });
  do_normuon_scale(x, first, count, stats, rows, cols, beta2, eps);
}

// A backend that does not declare capabilities().muon keeps these.
void Ops::do_muon_momentum(Tensor, Tensor, const std::vector<MuonSpan>&, float, bool, float) {
  throw_error("the ", name(), " backend has no Muon optimizer yet (--optimizer muon)");
}
void Ops::do_newton_schulz(const std::vector<Tensor>&, const std::vector<Tensor>&, int64_t, int64_t,
                           const NewtonSchulz&) {
  throw_error("the ", name(), " backend has no Muon optimizer yet (--optimizer muon)");
}
void Ops::do_muon_update(Tensor, Tensor, const std::vector<MuonSpan>&, float, float) {
  throw_error("the ", name(), " backend has no Muon optimizer yet (--optimizer muon)");
}
void Ops::do_row_mean_squares(Tensor, Tensor, int64_t, int64_t) {
  throw_error("the ", name(), " backend has no Muon optimizer yet (--optimizer muon)");
}
void Ops::do_normuon_scale(Tensor, int64_t, int64_t, Tensor, int64_t, int64_t, float, float) {
  throw_error("the ", name(), " backend has no Muon optimizer yet (--optimizer muon)");
}

}  // namespace fsdp
