// Which token windows each rank trains on, step by step, resumably.
//
// The N tokens are cut into S = (N - 1) / T non-overlapping windows; window w
// is tokens [w*T, w*T + T + 1): the first T are inputs, the last T targets.
// Sequences are numbered by a global position p = 0, 1, 2, ... that runs
// across epochs: epoch p / S visits window perm_epoch(p % S), where perm_epoch
// is a Permutation keyed by (seed, epoch). Each epoch sees every window once.
//
// A step consumes G = world * batch * grad_accum positions; rank r's row b of
// micro-batch m reads position consumed + (m * world + r) * batch + b. So the
// set of sequences in a step, and the position each one has, does not depend
// on how the step is split over ranks and micro-batches: runs on 1 and 4
// ranks with the same G see the same data. Memory does not grow with N.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "data/token_dataset.h"

namespace fsdp {

// Everything a checkpoint needs to continue the data order exactly. Keeping
// the position (not just the step) lets a run resume with a different G.
struct SamplerState {
  uint64_t seed = 0;
  int64_t step = 0;      // optimizer steps completed
  int64_t consumed = 0;  // positions used by those steps: the next step's first

  // Stored as named int64 values (the seed's bits reinterpreted), e.g. one
  // HDF5 attribute per name.
  static constexpr std::array<const char*, 3> kNames = {"seed", "step", "consumed"};
  std::array<int64_t, 3> to_array() const;
  static SamplerState from_array(const std::array<int64_t, 3>& values);
  bool operator==(const SamplerState&) const = default;
};

// Maps global positions to windows; pure arithmetic, no I/O.
class Sampler {
 public:
  // Throws fsdp::Error when num_tokens < seq_len + 1 (not one window).
  Sampler(int64_t num_tokens, int seq_len, uint64_t seed);

  int seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  int64_t windows_per_epoch() const { return windows_; }
  int64_t epoch_of(int64_t position) const { return position / windows_; }
  int64_t window_of(int64_t position) const;
  // First token of the window at `position`; the window spans seq_len + 1.
  int64_t window_start(int64_t position) const { return window_of(position) * seq_len_; }

 private:
  int64_t windows_;
  int seq_len_;
  uint64_t seed_;
};

// Training micro-batches of one rank. Keeps a reference to `data`, which must
// outlive it. Per step: next_micro_batch(m, ...) for each m in
// [0, grad_accum), in any order, then end_step().
class BatchLoader {
 public:
  BatchLoader(const TokenDataset& data, int seq_len, int batch_size, int grad_accum, int rank,
              int world, uint64_t seed);

  // Fills inputs and targets, each [batch_size, seq_len] row-major, with
  // micro-batch `micro` of the current step.
  void next_micro_batch(int micro, int32_t* inputs, int32_t* targets);
  void end_step();

  // Global position of this rank's row `row` of micro-batch `micro` now.
  int64_t position(int micro, int row) const;
  int64_t sequences_per_step() const { return per_step_; }
  int64_t step() const { return state_.step; }
  const Sampler& sampler() const { return sampler_; }

  SamplerState state() const { return state_; }
  // Continues from a checkpoint: its seed replaces the constructor's, so the
  // resumed run keeps the original data order.
  void restore(const SamplerState& state);

 private:
  const TokenDataset* data_;
  Sampler sampler_;
  int batch_, accum_, rank_, world_;
  int64_t per_step_;
  SamplerState state_;
  std::vector<int32_t> window_;  // seq_len + 1 tokens
};

// Validation batches: windows in file order, no shuffle, so every evaluation
// over the same batch indices sees the same tokens. Rank r's row b of batch i
// is window ((i * world + r) * batch + b) mod S_val.
class ValBatches {
 public:
  ValBatches(const TokenDataset& data, int seq_len, int batch_size, int rank, int world);

  void get(int64_t batch_index, int32_t* inputs, int32_t* targets);
  int64_t window(int64_t batch_index, int row) const;
  int64_t windows() const { return windows_; }

 private:
  const TokenDataset* data_;
  int seq_len_, batch_, rank_, world_;
  int64_t windows_;
  std::vector<int32_t> window_;
};

}  // namespace fsdp
