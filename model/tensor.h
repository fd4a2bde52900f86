// A non-owning view of a buffer on the backend's device. Shapes travel as
// explicit sizes in each op call (as in llm.c), so a Tensor is only pointer,
// element type and length.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"
#include "common/error.h"

namespace fsdp {

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t numel = 0;

  size_t bytes() const { return size_t(numel) * dtype_size(dtype); }
  Tensor slice(int64_t offset, int64_t n) const {
    FSDP_CHECK(offset >= 0 && n >= 0 && offset + n <= numel);
    return {static_cast<char*>(data) + offset * int64_t(dtype_size(dtype)), dtype, n};
  }
  float* f32() const {
    FSDP_CHECK(dtype == DType::f32, "tensor is ", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  int32_t* i32() const {
    FSDP_CHECK(dtype == DType::i32, "tensor is ", dtype_name(dtype));
    return static_cast<int32_t*>(data);
  }
};

}  // namespace fsdp
