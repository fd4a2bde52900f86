#include "data/sampler.h"

#include <algorithm>
#include <bit>
#include <string>

#include "common/error.h"
#include "data/permutation.h"

namespace fsdp {

namespace {

void check_shape(int seq_len, int batch, int accum, int rank, int world) {
  if (seq_len < 1) throw_error("sequence length ", seq_len, " must be at least 1");
  if (batch < 1) throw_error("batch size ", batch, " must be at least 1");
  if (accum < 1) throw_error("gradient accumulation ", accum, " must be at least 1");
  FSDP_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of world ", world);
}

// Reads one window and splits it into an input row and a target row.
void read_window(const TokenDataset& data, int64_t start, int seq_len, std::vector<int32_t>& window,
                 int32_t* inputs, int32_t* targets) {
  data.read(start, seq_len + 1, window.data());
  std::copy_n(window.begin(), seq_len, inputs);
  std::copy_n(window.begin() + 1, seq_len, targets);
}

// The dataset's length, after the checks every loader needs.
int64_t checked_tokens(const TokenDataset& data, int seq_len, int batch, int accum, int rank,
                       int world) {
  check_shape(seq_len, batch, accum, rank, world);
  data.require_min_tokens(int64_t{seq_len} + 1, "one sequence (seq_len " + std::to_string(seq_len) +
                                                    ", plus 1 for the last target)");
  return data.size();
}

}  // namespace

std::array<int64_t, 3> SamplerState::to_array() const {
  return {std::bit_cast<int64_t>(seed), step, consumed};
}

SamplerState SamplerState::from_array(const std::array<int64_t, 3>& v) {
  return SamplerState{std::bit_cast<uint64_t>(v[0]), v[1], v[2]};
}

Sampler::Sampler(int64_t num_tokens, int seq_len, uint64_t seed)
    : windows_(seq_len >= 1 && num_tokens >= 1 ? (num_tokens - 1) / seq_len : 0),
      seq_len_(seq_len),
      seed_(seed) {
  if (seq_len < 1) throw_error("sequence length ", seq_len, " must be at least 1");
  if (windows_ < 1)
    throw_error("a dataset of ", num_tokens, " tokens is shorter than one sequence of ", seq_len,
                " tokens plus its last target");
}

int64_t Sampler::window_of(int64_t position) const {
  FSDP_CHECK(position >= 0, "negative sequence position ", position);
  const uint64_t epoch = static_cast<uint64_t>(position / windows_);
  // Mixing the epoch before combining keeps (seed, epoch) and (seed', epoch')
  // pairs from colliding through simple xor arithmetic.
  const Permutation perm(static_cast<uint64_t>(windows_), seed_ ^ mix64(epoch ^ 0x5eedull));
  return static_cast<int64_t>(perm(static_cast<uint64_t>(position % windows_)));
}

BatchLoader::BatchLoader(const TokenDataset& data, int seq_len, int batch_size, int grad_accum,
                         int rank, int world, uint64_t seed)
    : data_(&data),
      sampler_(checked_tokens(data, seq_len, batch_size, grad_accum, rank, world), seq_len, seed),
      batch_(batch_size),
      accum_(grad_accum),
      rank_(rank),
      world_(world),
      per_step_(int64_t{world} * batch_size * grad_accum),
      state_{seed, 0, 0},
      window_(static_cast<size_t>(seq_len) + 1) {}

int64_t BatchLoader::position(int micro, int row) const {
  FSDP_CHECK(micro >= 0 && micro < accum_ && row >= 0 && row < batch_, "micro-batch ", micro,
             " row ", row);
  return state_.consumed + (int64_t{micro} * world_ + rank_) * batch_ + row;
}

void BatchLoader::next_micro_batch(int micro, int32_t* inputs, int32_t* targets) {
  const int t = sampler_.seq_len();
  for (int b = 0; b < batch_; ++b) {
    const int64_t start = sampler_.window_start(position(micro, b));
    read_window(*data_, start, t, window_, inputs + int64_t{b} * t, targets + int64_t{b} * t);
  }
}

void BatchLoader::end_step() {
  ++state_.step;
  state_.consumed += per_step_;
}

void BatchLoader::restore(const SamplerState& state) {
  if (state.step < 0 || state.consumed < 0)
    throw_error("checkpoint data-sampler state is invalid (step ", state.step, ", consumed ",
                state.consumed, ")");
  sampler_ = Sampler(data_->size(), sampler_.seq_len(), state.seed);
  state_ = state;
}

ValBatches::ValBatches(const TokenDataset& data, int seq_len, int batch_size, int rank, int world)
    : data_(&data),
      seq_len_(seq_len),
      batch_(batch_size),
      rank_(rank),
      world_(world),
      windows_((checked_tokens(data, seq_len, batch_size, 1, rank, world) - 1) / seq_len),
      window_(static_cast<size_t>(seq_len) + 1) {}

int64_t ValBatches::window(int64_t batch_index, int row) const {
  FSDP_CHECK(batch_index >= 0 && row >= 0 && row < batch_, "batch ", batch_index, " row ", row);
  return ((batch_index * world_ + rank_) * batch_ + row) % windows_;
}

void ValBatches::get(int64_t batch_index, int32_t* inputs, int32_t* targets) {
  for (int b = 0; b < batch_; ++b) {
    const int64_t start = window(batch_index, b) * seq_len_;
    read_window(*data_, start, seq_len_, window_, inputs + int64_t{b} * seq_len_,
                targets + int64_t{b} * seq_len_);
  }
}

}  // namespace fsdp
