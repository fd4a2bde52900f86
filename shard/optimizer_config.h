// The optimizer's hyperparameters, written once: the option table's defaults
// (src/options/option_table.cpp) are these, and the engine's step takes them as they
// are. The learning rate comes per step from the schedule (src/policy/lr_schedule.h).
#pragma once

namespace fsdp {

struct AdamWConfig {
  float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
  float weight_decay = 0.1f;  // matrices only; Muon's matrices take it too
  float grad_clip = 1.0f;     // global L2 norm over every parameter; 0 disables

  bool operator==(const AdamWConfig&) const = default;
};

enum class OptimizerKind { adamw, muon };

// How Muon scales its orthogonalised update U (rows x cols) before the
// learning rate, as torch.optim.Muon's adjust_lr_fn names them:
// match_rms_adamw: 0.2 * sqrt(max(rows, cols)), which gives the update the
//   RMS of a typical AdamW update (Moonshot, "Muon is Scalable for LLM
//   Training"), so AdamW's learning rate and weight decay carry over;
// original: sqrt(max(1, rows / cols)) (Keller Jordan's Muon).
enum class MuonLrAdjust { match_rms_adamw, original };

// The odd quintics Newton-Schulz iterates (values in shard/muon.h):
// jordan: one quintic every step (Keller Jordan's Muon, torch.optim.Muon);
// polar_express: one per step, each the minimax-best for the singular values
//   the steps before leave (Amsel et al. 2025, "The Polar Express"), which
//   ends closer to orthogonal in the same 5 steps.
enum class MuonNsCoefficients { jordan, polar_express };
// The steps polar_express's table is tuned for: fewer leave singular values
// far from 1 (4 steps: up to 1.58), and the option refuses them.
inline constexpr int kPolarExpressSteps = 5;

// Muon (Keller Jordan, 2024; torch.optim.Muon in PyTorch >= 2.9), for the
// 2-D block matrices: momentum buffer B = m B + (1 - m) g; the direction is
// g + m (B - g) with Nesterov, else B; Newton-Schulz makes it (nearly)
// orthogonal; then W = W (1 - lr wd) - lr adjust U. Newton-Schulz runs on
// the direction divided by its Frobenius norm (clamped at 1e-7), transposed
// first when it has more rows than columns (shard/muon.h).
struct MuonConfig {
  float momentum = 0.95f;
  bool nesterov = true;
  int ns_steps = 5;
  MuonLrAdjust lr_adjust = MuonLrAdjust::match_rms_adamw;
  MuonNsCoefficients ns_coefficients = MuonNsCoefficients::jordan;
  // NorMuon (Li, Liu, Wang et al. 2025, arXiv:2510.05491): each row (output
  // neuron) of the orthogonalised update divided by the root of its own
  // running mean square, v = beta2 v + (1 - beta2) mean(U_row^2), then the
  // whole matrix rescaled to U's Frobenius norm, so lr_adjust's meaning is
  // kept (shard/muon.h). Orthogonalisation leaves rows of unequal size;
  // this evens out how far each neuron moves.
  bool normuon = false;
  float normuon_beta2 = 0.95f;

  bool operator==(const MuonConfig&) const = default;
};

// Under adamw every parameter takes AdamW; under muon the block matrices
// (Wq, Wk, Wv, Wo, W1, W3, W2, each on its own) take Muon and the rest
// (embeddings, the untied head, the norm gains) AdamW, with the same
// learning rate, weight decay and clipping.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  AdamWConfig adamw;
  MuonConfig muon;

  bool operator==(const OptimizerConfig&) const = default;
};

}  // namespace fsdp
