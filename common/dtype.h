// Element types that cross folder boundaries: tensors (model), collectives
// (comm) and checkpoints all name them the same way.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp {

enum class DType : uint8_t { f32, bf16, i32 };

inline size_t dtype_size(DType t) {
  return t == DType::bf16 ? 2 : 4;
}
inline const char* dtype_name(DType t) {
  return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "i32";
}

}  // namespace fsdp
