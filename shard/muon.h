// Muon under ZeRO-3: each block matrix is orthogonalised whole, by one rank.
//
// A matrix's gradient lies in slices on the shard group's ranks. Each matrix
// gets an owner (balanced by Newton-Schulz FLOPs); per unit the momentum
// direction is all-gathered in f32, every owner runs Newton-Schulz on its
// matrices into an otherwise zero buffer, and a reduce-scatter (sum) hands
// each rank its slice of every result: adding zeros is exact, so the result
// is bitwise what one rank holding the whole model computes, on any rank
// count and split. Per step that is one more f32 all-gather and
// reduce-scatter of the unit's shard, and two f32 buffers of the largest
// unit holding a Muon matrix (counted by the memory plan). Hybrid sharding:
// every replica group does the same on the same all-reduced gradients.
//
// NorMuon (MuonConfig::normuon) needs each whole row's mean square, which
// only the owner sees, and keeps a second moment per row: the first `rows`
// elements of the matrix's optim/exp_avg_sq, which AdamW leaves alone there,
// so checkpoints, resharding and resets carry it as they carry the rest.
// Per unit the owners' row mean squares and the ranks' slices of the old
// moments meet in one small f32 all-reduce (each entry from one rank, zeros
// from the others: exact); every rank then computes the same factors and
// new moments, scales its slice of the update and keeps its slice of the
// moments. Bitwise, still, what one rank computes.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "model/ops.h"
#include "model/params.h"
#include "shard/layout.h"
#include "shard/optimizer_config.h"

namespace fsdp {

// The published iterations, the Frobenius norm clamped at 1e-7:
// jordan (Keller Jordan's Muon, as torch.optim.Muon): one quintic, chosen for
//   the largest slope at zero;
// polar_express (Amsel, Persson, Musco, Gower 2025, arXiv:2505.16932, the
//   table computed for 5 steps with a safety factor of 2e-2 and cushion 2,
//   as modded-nanogpt's and nanochat's Muon use it): step k's quintic is the
//   minimax-best on the interval the steps before leave; the norm gets a 1%
//   margin, and steps past the table repeat its last quintic.
// Singular values from 1e-3 to 1 of the norm end, after 5 steps, in
// [0.47, 1.20] under jordan and [0.85, 1.14] under polar_express (6 steps:
// [0.68, 1.20] and [0.96, 1.13]; tests/shard/test_muon_coefficients.cpp).
inline NewtonSchulz muon_newton_schulz(int steps,
                                       MuonNsCoefficients kind = MuonNsCoefficients::jordan) {
  if (kind == MuonNsCoefficients::polar_express)
    return {{{8.156554524902461f, -22.48329292557795f, 15.878769915207462f},
             {4.042929935166739f, -2.808917465908714f, 0.5000178451051316f},
             {3.8916678022926607f, -2.772484153217685f, 0.5060648178503393f},
             {3.285753657755655f, -2.3681294933425376f, 0.46449024233003106f},
             {2.3465413258596377f, -1.7097828382687081f, 0.42323551169305323f}},
            steps,
            1e-7f,
            1.01f};
  return {{{3.4445f, -4.7750f, 2.0315f}}, steps, 1e-7f, 1.0f};
}

// The parameters Muon updates: the block linears (ParamSpec::fp8 marks
// exactly those), each logical matrix on its own, packed or not.
inline bool takes_muon(const ParamSpec& p) {
  return p.fp8 && p.shape.size() == 2;
}

// Muon's learning-rate factor for a [rows, cols] matrix (MuonLrAdjust).
float muon_lr_scale(MuonLrAdjust adjust, int64_t rows, int64_t cols);

struct MuonMatrix {
  int unit = 0, param = 0;
  int64_t rows = 0, cols = 0;
  int owner = 0;  // the shard rank that orthogonalises it
  float lr_scale = 1;
};

// Every Muon matrix of the model, in unit and parameter order, with its
// owner: the largest Newton-Schulz cost first, each to the rank with the
// least so far (ties to the lower rank), so all ranks agree without talking.
std::vector<MuonMatrix> plan_muon(const std::vector<UnitSpec>& units, int shard_ranks,
                                  const MuonConfig& c);

// FLOPs of one Newton-Schulz step on a rows x cols matrix, on its wide
// orientation (m <= n): X X^T (2 m^2 n), A A (2 m^3), B X (2 m^2 n).
double newton_schulz_step_flops(int64_t rows, int64_t cols);

// A step's Newton-Schulz work under plan_muon's owners, for the scaling
// plan (tools/plan.py). MuonStep runs unit after unit, each waiting for its
// slowest owner, so the time a step takes follows `critical_flops`, the sum
// over units of the busiest rank's FLOPs in that unit, not total / ranks.
struct MuonCost {
  int64_t matrices = 0;
  int exchanged_units = 0;  // units holding a Muon matrix: one exchange each
  double total_flops = 0, critical_flops = 0;
  // The elements of the matrices those busiest ranks orthogonalise (the f32
  // norm and the casts to and from bf16 read and write them).
  int64_t critical_elems = 0;
};
MuonCost muon_cost(const std::vector<UnitSpec>& units, int shard_ranks, const MuonConfig& c);

// The f32 elements of the two buffers (per rank): each the largest unit
// holding a Muon matrix; with NorMuon, and two floats per row of the unit
// with the most Muon rows.
int64_t muon_buffer_elems(const std::vector<UnitSpec>& units,
                          const std::vector<UnitLayout>& layouts, int shard_ranks,
                          bool normuon = false);

// NorMuon's epsilon, under the root of each row's second moment.
inline constexpr float kNorMuonEps = 1e-8f;

class MuonStep {
 public:
  MuonStep(Ops& ops, Communicator& shard, const std::vector<UnitSpec>& units,
           const std::vector<UnitLayout>& layouts, const MuonConfig& c);
  ~MuonStep();
  MuonStep(const MuonStep&) = delete;
  MuonStep& operator=(const MuonStep&) = delete;

  // One unit's Muon matrices, on this rank's f32 shard: the momentum
  // (momentum: its buffer; grad scaled by grad_scale, then replaced by the
  // direction and, after the exchange, by the orthogonalised update), then
  // master = master (1 - lr wd) - lr scale U. Elements of other parameters
  // are left to AdamW. row_moments: the unit's optim/exp_avg_sq shard, which
  // NorMuon keeps its state in (untouched without it). Collective over the
  // shard group.
  void update_unit(int unit, const UnitLayout& layout, Tensor master, Tensor grad, Tensor momentum,
                   Tensor row_moments, float lr, float weight_decay, float grad_scale);
  // Whether parameter p of unit u is a Muon matrix.
  bool is_muon(int unit, int param) const;
  int64_t buffer_bytes() const;

 private:
  template <typename At>
  void orthogonalise(const std::vector<MuonMatrix>& mats, Tensor src, At at);
  // NorMuon's two halves around the exchange of the results: the row mean
  // squares of the matrices this rank owns (results in out_ at `at`) and its
  // slices of the old moments into stats_; then, with stats_ summed over the
  // group, this rank's slice of each update scaled and its moments kept.
  template <typename At>
  void gather_row_stats(const std::vector<MuonMatrix>& mats, const UnitLayout& l,
                        Tensor row_moments, At at);
  void scale_rows(const std::vector<MuonMatrix>& mats, const UnitLayout& l, Tensor update,
                  Tensor row_moments);

  Ops& ops_;
  Communicator& shard_;
  MuonConfig c_;
  std::vector<std::vector<MuonMatrix>> by_unit_;
  Tensor full_, out_;  // f32: the gathered directions, the owners' results
  Tensor stats_;       // f32, NorMuon: per matrix of a unit, rows' mean squares then moments
};

}  // namespace fsdp
