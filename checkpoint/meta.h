// What a checkpoint file holds besides its tensors, and the file's layout.
//
// One parallel-HDF5 file per save, written collectively by every rank, holds
// each parameter and AdamW moment as a dataset in its logical shape
// (model/<name>, optim/exp_avg/<name>, optim/exp_avg_sq/<name>) plus the
// run's metadata as attributes. Each rank writes and reads only the slices
// its shard owns, so a file saved on one world and shard-group size loads on
// any other.
//
// File layout (format_version 2):
//   /            attrs format_version, step, tokens_seen, optimizer_steps, seed,
//                world_size, shard_group_size, config (INI text),
//                tensor_checksums (uint64, one per tensor),
//                optimizer ("adamw" or "muon"; new in version 2, whose
//                files a version-1 build refuses: under muon the block
//                matrices' optim/exp_avg holds Muon's momentum and their
//                exp_avg_sq is zero, which AdamW must not read as moments;
//                under --muon-normuon, each matrix's first `rows` elements
//                of exp_avg_sq hold NorMuon's row moments, shard/muon.h),
//                and only in a --time-budget run's files: time_budget_steps
//                (the count it fixed, 0 before it did) and time_budget_used_s
//                (f32). Optional, so no new version: a build without them
//                resumes by its --steps, which is what it was told.
//                Likewise optional: loss_history (f64, the losses of the last
//                applied steps, oldest first: src/policy/divergence.h judges the
//                next step against them), and after a rollback rollbacks
//                (int64, how many the run made) and skipped_sequences (int64
//                pairs [first, end) of global sequence positions the data
//                order passed over, data/sampler.h).
//   /model       attrs vocab_size, n_layer, d_model, n_head, n_kv_head, d_ff,
//                max_seq_len, rope_theta, norm_eps, init_std, tie_embeddings, name;
//                one f32 dataset per parameter, e.g. model/blocks.3.attn.wq
//   /optim/exp_avg, /optim/exp_avg_sq   the same names and shapes
// Version 1 (no optimizer attribute, AdamW only) still loads, as adamw.
//   /sampler     one int64 attr per SamplerState::kNames entry (data/sampler.h)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "shard/optimizer_config.h"

namespace fsdp {

constexpr int kCheckpointFormatVersion = 2;
constexpr int kOldestCheckpointFormat = 1;  // still loaded

struct CheckpointMeta {
  // Filled by the caller before saving (identical on every rank).
  int64_t step = 0;  // optimizer steps completed; names the file
  int64_t tokens_seen = 0;
  uint64_t seed = 0;        // the run's --seed (parameter init)
  std::string config_text;  // the full configuration, INI
  // The data order as named int64 values (SamplerState::named()). The names
  // are free-form here, so checkpoint/ need not know data/; data/ checks
  // them on resume (SamplerState::from_named).
  std::vector<std::pair<std::string, int64_t>> sampler;
  // What optim/ holds (see the layout above).
  OptimizerKind optimizer = OptimizerKind::adamw;
  // A --time-budget run's (src/policy/time_budget.h); written only when has_budget.
  bool has_budget = false;
  int64_t budget_steps = 0;  // 0: not fixed yet
  double budget_used_s = 0;
  // --on-divergence's (src/policy/divergence.h); each written only when not empty/0.
  std::vector<double> loss_history;
  int64_t rollbacks = 0;
  std::vector<int64_t> skipped_sequences;  // [first, end) pairs, ascending

  // Filled by save from the engine and communicator, and by load from the file.
  int format_version = kCheckpointFormatVersion;
  int optimizer_steps = 0;
  int world_size = 0;
  int shard_group_size = 0;
  ModelConfig model;
};

}  // namespace fsdp
