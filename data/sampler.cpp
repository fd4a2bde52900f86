#include "data/sampler.h"

#include <algorithm>
#include <bit>

#include "common/error.h"
#include "data/permutation.h"

namespace fsdp {

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

Sampler Sampler::for_windows(int64_t windows, int seq_len, uint64_t seed) {
  // (N - 1) / T == windows for N = windows * T + 1.
  return Sampler(windows * std::max(seq_len, 1) + 1, seq_len, seed);
}

int64_t Sampler::window_of(int64_t position) const {
  FSDP_CHECK(position >= 0, "negative sequence position ", position);
  const uint64_t epoch = static_cast<uint64_t>(position / windows_);
  // Mixing the epoch before combining keeps (seed, epoch) and (seed', epoch')
  // pairs from colliding through simple xor arithmetic.
  const Permutation perm(static_cast<uint64_t>(windows_), seed_ ^ mix64(epoch ^ 0x5eedull));
  return static_cast<int64_t>(perm(static_cast<uint64_t>(position % windows_)));
}

}  // namespace fsdp
