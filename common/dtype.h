// Element types that cross folder boundaries: tensors (model), collectives
// (comm) and checkpoints all name them the same way.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

namespace fsdp {

// u8: raw bytes, the storage of FP8 tensors (their format travels beside
// them, common/fp8.h); gathered and copied, never reduced.
enum class DType : uint8_t { f32, bf16, i32, u8 };

inline size_t dtype_size(DType t) {
  return t == DType::u8 ? 1 : t == DType::bf16 ? 2 : 4;
}
inline const char* dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : t == DType::i32 ? "i32" : "u8";
}

// bf16 is the top half of an f32. Rounding is to nearest, ties to even (what
// the hardware does), and NaN stays a (quiet) NaN instead of rounding to inf.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(uint32_t(h) << 16);
}

}  // namespace fsdp
