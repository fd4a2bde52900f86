// cuBLASLt and cuDNN failures as fsdp::Error naming the call, in the style of
// comm/cuda_check.h (which handles the CUDA runtime and NCCL).
#pragma once

#include <cublasLt.h>
#include <cudnn.h>

#include <string>

#include "comm/cuda_check.h"

namespace fsdp {

inline void check_cublas(cublasStatus_t s, const char* call) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw_error(call_name(call), " failed: ", cublasLtGetStatusString(s));
}

inline void check_cudnn(cudnnStatus_t s, const char* call) {
  if (s != CUDNN_STATUS_SUCCESS) throw_error(call_name(call), " failed: ", cudnnGetErrorString(s));
}

}  // namespace fsdp

#define FSDP_CUBLAS_CHECK(call) ::fsdp::check_cublas((call), #call)
#define FSDP_CUDNN_CHECK(call) ::fsdp::check_cudnn((call), #call)
