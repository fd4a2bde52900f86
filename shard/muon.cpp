#include "shard/muon.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

namespace fsdp {

float muon_lr_scale(MuonLrAdjust adjust, int64_t rows, int64_t cols) {
  switch (adjust) {
    case MuonLrAdjust::match_rms_adamw:
      return float(0.2 * std::sqrt(double(std::max(rows, cols))));
    case MuonLrAdjust::original:
      return float(std::sqrt(std::max(1.0, double(rows) / double(cols))));
  }
  throw_error("internal: a MuonLrAdjust without a rule (shard/muon.cpp)");
}

double newton_schulz_step_flops(int64_t rows, int64_t cols) {
  const double m = double(std::min(rows, cols)), n = double(std::max(rows, cols));
  return 4 * m * m * n + 2 * m * m * m;
}

std::vector<MuonMatrix> plan_muon(const std::vector<UnitSpec>& units, int shard_ranks,
                                  const MuonConfig& c) {
  FSDP_CHECK(shard_ranks >= 1, "plan_muon over ", shard_ranks, " ranks");
  std::vector<MuonMatrix> all;
  std::vector<double> cost;
  for (int u = 0; u < int(units.size()); ++u)
    for (int p = 0; p < int(units[u].params.size()); ++p) {
      const ParamSpec& s = units[u].params[p];
      if (!takes_muon(s)) continue;
      const int64_t rows = s.shape[0], cols = s.shape[1];
      all.push_back({u, p, rows, cols, 0, muon_lr_scale(c.lr_adjust, rows, cols)});
      cost.push_back(newton_schulz_step_flops(rows, cols));
    }
  std::vector<size_t> order(all.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  std::vector<double> load(size_t(shard_ranks), 0.0);
  for (size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals
    all[i].owner = int(least - load.begin());
    *least += cost[i];
  }
  return all;
}

MuonCost muon_cost(const std::vector<UnitSpec>& units, int shard_ranks, const MuonConfig& c) {
  MuonCost cost;
  const size_t ranks = size_t(shard_ranks);
  std::vector<std::vector<double>> load(units.size(), std::vector<double>(ranks));
  std::vector<std::vector<int64_t>> elems(units.size(), std::vector<int64_t>(ranks));
  std::vector<bool> exchanged(units.size(), false);
  for (const MuonMatrix& m : plan_muon(units, shard_ranks, c)) {
    const double f = newton_schulz_step_flops(m.rows, m.cols);  // the busiest whatever the steps
    load[size_t(m.unit)][size_t(m.owner)] += f;
    elems[size_t(m.unit)][size_t(m.owner)] += m.rows * m.cols;
    exchanged[size_t(m.unit)] = true;
    cost.total_flops += c.ns_steps * f;
    ++cost.matrices;
  }
  for (size_t u = 0; u < units.size(); ++u) {
    const size_t busiest =
        size_t(std::max_element(load[u].begin(), load[u].end()) - load[u].begin());
    cost.critical_flops += c.ns_steps * load[u][busiest];
    cost.critical_elems += elems[u][busiest];
    cost.exchanged_units += exchanged[u] ? 1 : 0;
  }
  return cost;
}

namespace {
// The largest unit holding a Muon matrix: only those are exchanged (a
// model's embedding, often its largest unit, never is).
int64_t largest_muon_unit(const std::vector<UnitSpec>& units,
                          const std::vector<UnitLayout>& layouts) {
  FSDP_CHECK(units.size() == layouts.size(), units.size(), " units with ", layouts.size(),
             " layouts");
  int64_t largest = 0;
  for (size_t u = 0; u < units.size(); ++u)
    if (std::any_of(units[u].params.begin(), units[u].params.end(), takes_muon))
      largest = std::max(largest, layouts[u].padded);
  return largest;
}

// NorMuon's statistics (MuonStep::stats_) for the unit with the most Muon
// rows: two floats per row of its matrices.
int64_t largest_row_stats(const std::vector<UnitSpec>& units) {
  int64_t largest = 0;
  for (const UnitSpec& u : units) {
    int64_t n = 0;
    for (const ParamSpec& p : u.params)
      if (takes_muon(p)) n += 2 * p.shape[0];
    largest = std::max(largest, n);
  }
  return largest;
}
}  // namespace

int64_t muon_buffer_elems(const std::vector<UnitSpec>& units,
                          const std::vector<UnitLayout>& layouts, int shard_ranks, bool normuon) {
  // One rank orthogonalises straight from its shard: only the results' buffer.
  return (shard_ranks > 1 ? 2 : 1) * largest_muon_unit(units, layouts) +
         (normuon ? largest_row_stats(units) : 0);
}

MuonStep::MuonStep(Ops& ops, Communicator& shard, const std::vector<UnitSpec>& units,
                   const std::vector<UnitLayout>& layouts, const MuonConfig& c)
    : ops_(ops), shard_(shard), c_(c), by_unit_(units.size()) {
  FSDP_CHECK(ops.capabilities().muon, "the ", ops.name(),
             " backend has no Muon optimizer yet (--optimizer muon)");
  for (const MuonMatrix& m : plan_muon(units, shard.size(), c))
    by_unit_[size_t(m.unit)].push_back(m);
  const int64_t largest = largest_muon_unit(units, layouts);
  if (largest == 0) return;  // no Muon matrix: nothing to exchange
  out_ = ops_.alloc(DType::f32, largest);
  if (shard.size() > 1) full_ = ops_.alloc(DType::f32, largest);
  if (c.normuon) stats_ = ops_.alloc(DType::f32, largest_row_stats(units));
}

MuonStep::~MuonStep() {
  if (out_.data) ops_.free(out_);
  if (full_.data) ops_.free(full_);
  if (stats_.data) ops_.free(stats_);
}

int64_t MuonStep::buffer_bytes() const {
  return int64_t(out_.bytes() + full_.bytes() + stats_.bytes());
}

bool MuonStep::is_muon(int unit, int param) const {
  for (const MuonMatrix& m : by_unit_.at(size_t(unit)))
    if (m.param == param) return true;
  return false;
}

// Newton-Schulz of each matrix, from src to out_ at the same offset (at(m)):
// matrices of one shape in one call, so a backend can batch their GEMMs.
template <typename At>
void MuonStep::orthogonalise(const std::vector<MuonMatrix>& mats, Tensor src, At at) {
  const NewtonSchulz ns = muon_newton_schulz(c_.ns_steps, c_.ns_coefficients);
  std::vector<bool> done(mats.size(), false);
  for (size_t i = 0; i < mats.size(); ++i) {
    if (done[i]) continue;
    const int64_t rows = mats[i].rows, cols = mats[i].cols, n = rows * cols;
    std::vector<Tensor> outs, xs;
    for (size_t j = i; j < mats.size(); ++j)
      if (!done[j] && mats[j].rows == rows && mats[j].cols == cols) {
        done[j] = true;
        outs.push_back(out_.slice(at(mats[j]), n));
        xs.push_back(src.slice(at(mats[j]), n));
      }
    ops_.newton_schulz(outs, xs, rows, cols, ns);
  }
}

namespace {
// Where matrix m's elements [0, rows) (its NorMuon moments) meet rank's shard:
// the first of them there, how many, and where in the shard they start.
struct MomentSlice {
  int64_t first = 0, count = 0, local = 0;
};
// The part of stats_ one unit uses: per matrix, its rows' mean squares
// then their moments.
int64_t row_stats_elems(const std::vector<MuonMatrix>& mats) {
  int64_t n = 0;
  for (const MuonMatrix& m : mats) n += 2 * m.rows;
  return n;
}
MomentSlice moment_slice(const UnitLayout& l, const MuonMatrix& m, int rank) {
  const Overlap o = shard_overlap(l, m.param, rank);
  const int64_t first = o.begin - l.offsets[size_t(m.param)];  // of the matrix's elements
  const int64_t end = std::min(first + o.count, m.rows);
  if (o.count == 0 || end <= first) return {};
  return {first, end - first, o.local};
}
}  // namespace

template <typename At>
void MuonStep::gather_row_stats(const std::vector<MuonMatrix>& mats, const UnitLayout& l,
                                Tensor row_moments, At at) {
  const int rank = shard_.rank();
  int64_t base = 0;
  ops_.zero(stats_.slice(0, row_stats_elems(mats)));
  for (const MuonMatrix& m : mats) {
    if (m.owner == rank)
      ops_.row_mean_squares(stats_.slice(base, m.rows), out_.slice(at(m), m.rows * m.cols), m.rows,
                            m.cols);
    const MomentSlice v = moment_slice(l, m, rank);
    if (v.count > 0)
      ops_.copy(stats_.slice(base + m.rows + v.first, v.count),
                row_moments.slice(v.local, v.count));
    base += 2 * m.rows;
  }
}

void MuonStep::scale_rows(const std::vector<MuonMatrix>& mats, const UnitLayout& l, Tensor update,
                          Tensor row_moments) {
  const int rank = shard_.rank();
  int64_t base = 0;
  for (const MuonMatrix& m : mats) {
    const Overlap o = shard_overlap(l, m.param, rank);
    if (o.count > 0) {
      const Tensor stats = stats_.slice(base, 2 * m.rows);
      ops_.normuon_scale(update.slice(o.local, o.count), o.begin - l.offsets[size_t(m.param)],
                         o.count, stats, m.rows, m.cols, c_.normuon_beta2, kNorMuonEps);
      const MomentSlice v = moment_slice(l, m, rank);
      if (v.count > 0)
        ops_.copy(row_moments.slice(v.local, v.count), stats.slice(m.rows + v.first, v.count));
    }
    base += 2 * m.rows;
  }
}

void MuonStep::update_unit(int unit, const UnitLayout& l, Tensor master, Tensor grad,
                           Tensor momentum, Tensor row_moments, float lr, float weight_decay,
                           float grad_scale) {
  const std::vector<MuonMatrix>& mats = by_unit_.at(size_t(unit));
  if (mats.empty()) return;
  const int rank = shard_.rank();
  std::vector<MuonSpan> spans;
  for (const MuonMatrix& m : mats) {
    const Overlap o = shard_overlap(l, m.param, rank);
    if (o.count > 0) spans.push_back({o.local, o.count, m.lr_scale});
  }
  std::sort(spans.begin(), spans.end(),
            [](const MuonSpan& a, const MuonSpan& b) { return a.begin < b.begin; });
  ops_.muon_momentum(grad, momentum, spans, c_.momentum, c_.nesterov, grad_scale);

  Tensor update;
  if (shard_.size() == 1) {
    // The shard is the whole unit: orthogonalise in place of the gather.
    const auto at = [&](const MuonMatrix& m) { return shard_overlap(l, m.param, 0).local; };
    orthogonalise(mats, grad, at);
    update = out_.slice(0, master.numel);
    if (c_.normuon) {
      gather_row_stats(mats, l, row_moments, at);
      scale_rows(mats, l, update, row_moments);
    }
  } else {
    shard_.wait_stream(ops_.stream());  // the directions were just computed there
    std::vector<WorkHandle> parts;
    for (const Segment& g : l.segments)
      parts.push_back(shard_.all_gather(grad.slice(g.local, g.shard).data,
                                        full_.slice(g.begin, g.padded).data, size_t(g.shard),
                                        DType::f32));
    join_work(std::move(parts))->wait();
    ops_.zero(out_.slice(0, l.padded));
    std::vector<MuonMatrix> mine;
    for (const MuonMatrix& m : mats)
      if (m.owner == rank) mine.push_back(m);
    const auto at = [&](const MuonMatrix& m) { return l.offsets[size_t(m.param)]; };
    orthogonalise(mine, full_, at);
    if (c_.normuon) gather_row_stats(mats, l, row_moments, at);
    // Every rank's slice of the owners' results: a sum with zeros, which is
    // exact. The gathered directions are spent, so full_ takes the slices.
    shard_.wait_stream(ops_.stream());
    parts.clear();
    for (const Segment& g : l.segments)
      parts.push_back(shard_.reduce_scatter(out_.slice(g.begin, g.padded).data,
                                            full_.slice(g.local, g.shard).data, size_t(g.shard),
                                            DType::f32, ReduceOp::sum));
    if (c_.normuon)
      parts.push_back(
          shard_.all_reduce(stats_.data, size_t(row_stats_elems(mats)), DType::f32, ReduceOp::sum));
    join_work(std::move(parts))->wait();
    update = full_.slice(0, master.numel);
    if (c_.normuon) scale_rows(mats, l, update, row_moments);
  }
  ops_.muon_update(master, update, spans, lr, weight_decay);
}

}  // namespace fsdp
