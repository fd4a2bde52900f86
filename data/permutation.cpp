#include "data/permutation.h"

#include <algorithm>
#include <bit>

#include "common/error.h"

namespace fsdp {

Permutation::Permutation(uint64_t n, uint64_t key) : n_(n) {
  FSDP_CHECK(n >= 1 && n <= (uint64_t{1} << 62), "permutation size ", n);
  // Both halves need at least one bit, so even n = 1 gets a 4-element domain.
  const int bits = std::max(2, static_cast<int>(std::bit_width(n - 1)));
  half_bits_ = (bits + 1) / 2;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
  uint64_t k = mix64(key);
  for (auto& rk : round_keys_) rk = k = mix64(k);
}

uint64_t Permutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t rk : round_keys_) {
    const uint64_t next = left ^ (mix64(right ^ rk) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t i) const {
  FSDP_CHECK(i < n_, "permutation index ", i, " outside [0, ", n_, ")");
  // Walking the cycle that contains i always comes back below n (at i itself
  // at the latest), so this terminates and stays a bijection.
  do i = feistel(i);
  while (i >= n_);
  return i;
}

}  // namespace fsdp
