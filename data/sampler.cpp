#include "data/sampler.h"

#include <algorithm>
#include <bit>

#include "common/error.h"
#include "data/permutation.h"

namespace fsdp {

SamplerState::Named SamplerState::named() const {
  return {{kNames[0], std::bit_cast<int64_t>(seed)}, {kNames[1], step}, {kNames[2], consumed}};
}

SamplerState SamplerState::from_named(const Named& named, int64_t step, const std::string& what,
                                      int64_t skipped) {
  std::array<int64_t, kNames.size()> values{};
  std::array<bool, kNames.size()> have{};
  for (const auto& [name, v] : named) {
    size_t i = 0;
    while (i < kNames.size() && name != kNames[i]) ++i;
    if (i == kNames.size())
      throw_error(what, " has an attribute '", name, "' this build does not write");
    if (have[i]) throw_error(what, " has '", name, "' twice");
    values[i] = v, have[i] = true;
  }
  for (size_t i = 0; i < have.size(); ++i)
    if (!have[i])
      throw_error(what, " lacks '", kNames[i], "', so it cannot continue the data order");
  const SamplerState state{std::bit_cast<uint64_t>(values[0]), values[1], values[2]};
  if (state.step != step)
    throw_error(what, ": its 'step' is ", state.step, " but it was saved at step ", step);
  // Each step consumes one global batch of positions (far below 2^31); the
  // cap of 2^62 keeps the sampler's int64 arithmetic from overflowing.
  constexpr int64_t kMaxPerStep = int64_t{1} << 31, kCap = int64_t{1} << 62;
  const int64_t by_steps = step > kCap / kMaxPerStep ? kCap : step * kMaxPerStep;
  const int64_t most = by_steps + std::clamp(skipped, int64_t{0}, kCap - by_steps);
  if (state.consumed < 0 || state.consumed > most)
    throw_error(what, ": its 'consumed' is ", state.consumed, "; at step ", step,
                " it must be between 0 and ", most);
  return state;
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
