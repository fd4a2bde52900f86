// The checkpoint checksum's vectorised loop against the definition, one
// element at a time: every length around the vector widths, unaligned
// starts, and pieces summed in any split (what lets each rank hash its own
// slice). The clone the CPU picks is the one judged; on this project's
// machines (AVX-512) that is the widest.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <vector>

#include "checkpoint/checksum.h"
#include "common/mix64.h"

namespace fsdp::ckpt {
namespace {

// checksum.h's definition, element by element, written independently of
// the loop under test.
uint64_t by_definition(uint64_t first, const float* v, size_t n) {
  uint64_t sum = 0;
  for (uint64_t index = first; index < first + n; ++index)
    sum += mix64(index << 32 | std::bit_cast<uint32_t>(v[index - first]));
  return sum;
}

std::vector<float> values(size_t n) {
  std::vector<float> v(n);
  // Signs, zeros, denormals and NaN bits: the hash sees bits, not values.
  const uint32_t odd[] = {0x80000000u, 0x00000001u, 0x7fc00001u, 0xff800000u};
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = uint32_t(mix64(i) >> 32);
    if (i % 17 == 3) bits = odd[(i / 17) % 4];
    std::memcpy(&v[i], &bits, sizeof bits);
  }
  return v;
}

TEST(Checksum, EveryLengthAndStartMatchesTheDefinition) {
  const std::vector<float> v = values(300);
  for (size_t start = 0; start < 9; ++start)
    for (size_t n = 0; n + start <= v.size(); ++n)
      ASSERT_EQ(checksum_of(1000 + start, v.data() + start, n),
                by_definition(1000 + start, v.data() + start, n))
          << "start " << start << ", n " << n;
}

TEST(Checksum, PiecesSumToTheWhole) {
  const std::vector<float> v = values(100003);
  const uint64_t whole = checksum_of(0, v.data(), v.size());
  EXPECT_EQ(whole, by_definition(0, v.data(), v.size()));
  for (size_t cut : {size_t(1), size_t(63), size_t(4096), size_t(100002)})
    EXPECT_EQ(checksum_of(0, v.data(), cut) + checksum_of(cut, v.data() + cut, v.size() - cut),
              whole)
        << "cut at " << cut;
}

TEST(Checksum, PositionAndBitsBothCount) {
  std::vector<float> v = values(64);
  const uint64_t sum = checksum_of(0, v.data(), v.size());
  EXPECT_NE(checksum_of(1, v.data(), v.size()), sum) << "the same values one index later";
  std::swap(v[10], v[11]);
  EXPECT_NE(checksum_of(0, v.data(), v.size()), sum) << "two elements swapped";
  std::swap(v[10], v[11]);
  uint32_t bits = 0;
  std::memcpy(&bits, &v[40], sizeof bits);
  bits ^= 1;
  std::memcpy(&v[40], &bits, sizeof bits);
  EXPECT_NE(checksum_of(0, v.data(), v.size()), sum) << "one bit of one element";
}

}  // namespace
}  // namespace fsdp::ckpt
