// splitmix64's finaliser: a cheap, well-mixed 64-bit hash. Parameter init,
// the data order and checkpoint checksums all derive from it, so a value
// computed from (seed, position) is the same on every rank and every run.
#pragma once

#include <cstdint>

namespace fsdp {

inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace fsdp
