// A pseudo-random bijection of [0, n) in O(1) memory, so an epoch's shuffle
// costs nothing however many windows the dataset holds. A balanced Feistel
// network permutes [0, 2^k) with 2^k the smallest even power of two >= n;
// cycle-walking (re-applying it until the value lands below n) restricts that
// bijection to [0, n). Since 2^k < 4n, a lookup takes under 4 passes on average.
#pragma once

#include <array>
#include <cstdint>

#include "common/mix64.h"

namespace fsdp {

class Permutation {
 public:
  // n in [1, 2^62]; the key selects one of the permutations.
  Permutation(uint64_t n, uint64_t key);

  uint64_t size() const { return n_; }
  uint64_t operator()(uint64_t i) const;  // i in [0, n)

 private:
  static constexpr int kRounds = 6;

  uint64_t feistel(uint64_t x) const;

  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  std::array<uint64_t, kRounds> round_keys_;
};

}  // namespace fsdp
