// Which token windows each rank trains on, step by step, resumably.
//
// The stream's files are cut into S windows (data/token_stream.h,
// WindowIndex): a file of N tokens holds (N - 1) / T, window w of it tokens
// [w*T, w*T + T + 1): the first T are inputs, the last T targets.
// Sequences are numbered by a global position p = 0, 1, 2, ... that runs
// across epochs: epoch p / S visits window perm_epoch(p % S), where perm_epoch
// is a Permutation keyed by (seed, epoch). Each epoch sees every window once.
//
// A step consumes G = world * batch * grad_accum positions; rank r's row b of
// micro-batch m reads position consumed + (m * world + r) * batch + b. So the
// set of sequences in a step, and the position each one has, does not depend
// on how the step is split over ranks and micro-batches: runs on 1 and 4
// ranks with the same G see the same data. Memory does not grow with N.
//
// Positions map to windows independently (no two-level "block" shuffle), even
// though that makes each window its own read. A block shuffle gets large
// contiguous reads only if each rank owns whole blocks, which makes the order
// depend on the world size, or if every rank reads every block and keeps its
// share, which multiplies the bytes read by the world size. Exact,
// world-size-independent order is what lets a run resume on another rank
// count; BatchLoader (data/batch_loader.h) instead reads a whole step of
// windows per rank in one locked pass, ahead of time, on a background thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fsdp {

// Everything a checkpoint needs to continue the data order exactly. Keeping
// the position (not just the step) lets a run resume with a different G.
struct SamplerState {
  uint64_t seed = 0;
  int64_t step = 0;  // optimizer steps completed
  // Positions used by those steps, and any a rollback skipped: the next
  // step's first.
  int64_t consumed = 0;

  // Stored as named int64 values (the seed's bits reinterpreted), e.g. one
  // HDF5 attribute per name (checkpoint/meta.h).
  using Named = std::vector<std::pair<std::string, int64_t>>;
  static constexpr std::array<const char*, 3> kNames = {"seed", "step", "consumed"};
  Named named() const;
  // The state a run saved as named() after `step` optimizer steps. The batch
  // loader would take any value, so this is where a stored state is judged:
  // throws fsdp::Error "<what> ..." naming the value when a name is unknown,
  // repeated or missing, the state is of another step, or its position is
  // not a count that `step` steps, and the `skipped` positions a rollback
  // passed over (src/policy/divergence.h), can reach.
  static SamplerState from_named(const Named& values, int64_t step, const std::string& what,
                                 int64_t skipped = 0);
  bool operator==(const SamplerState&) const = default;
};

// Maps global positions to windows; pure arithmetic, no I/O.
class Sampler {
 public:
  // The windows of one file of num_tokens tokens. Throws fsdp::Error when
  // num_tokens < seq_len + 1 (not one window).
  Sampler(int64_t num_tokens, int seq_len, uint64_t seed);
  // `windows` windows, e.g. WindowIndex::count() of a multi-file stream.
  static Sampler for_windows(int64_t windows, int seq_len, uint64_t seed);

  int seq_len() const { return seq_len_; }
  uint64_t seed() const { return seed_; }
  int64_t windows_per_epoch() const { return windows_; }
  int64_t epoch_of(int64_t position) const { return position / windows_; }
  int64_t window_of(int64_t position) const;
  // First token of the window at `position` in a one-file stream; the window
  // spans seq_len + 1. Multi-file streams map windows with WindowIndex.
  int64_t window_start(int64_t position) const { return window_of(position) * seq_len_; }

 private:
  int64_t windows_;
  int seq_len_;
  uint64_t seed_;
};

}  // namespace fsdp
