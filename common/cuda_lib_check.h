// Failed cuBLASLt and cuDNN calls as fsdp::Error naming the call, its call
// site and the op, in the style of common/cuda_check.h:
//   "cublasLtMatmul failed at model/cuda/gemm.cpp:131 (gemm m=1024 n=8192
//    k=1024 A^T): CUBLAS_STATUS_NOT_SUPPORTED"
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <string_view>

#include "common/cuda_check.h"

namespace fsdp {

inline void check_cublas(cublasStatus_t s, const char* call, const char* file, int line,
                         std::string_view op = {}) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_call_error(call, file, line, op, cublasLtGetStatusString(s));
}

inline void check_cudnn(cudnnStatus_t s, const char* call, const char* file, int line,
                        std::string_view op = {}) {
  if (s != CUDNN_STATUS_SUCCESS) throw_call_error(call, file, line, op, cudnnGetErrorString(s));
}

}  // namespace fsdp

#define FSDP_CUBLAS_CHECK(call, ...) \
  ::fsdp::check_cublas((call), #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define FSDP_CUDNN_CHECK(call, ...) \
  ::fsdp::check_cudnn((call), #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
