// Failed CUDA runtime calls as fsdp::Error naming the call, its call site
// (file:line) and, where the caller gives one, the op it served:
//   "cudaMalloc failed at model/cuda/cuda_ops.cpp:88 (activations, 7.1 GiB):
//    out of memory"
// cuBLASLt and cuDNN checks are in common/cuda_lib_check.h, NCCL's in
// comm/nccl_check.h (only comm/ talks to NCCL).
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/source_site.h"

namespace fsdp {

// "cudaEventRecord(ev, stream_)" -> "cudaEventRecord": the name is what a
// user can search for; the arguments mean nothing to them.
inline std::string_view call_name(std::string_view call) {
  return call.substr(0, call.find('('));
}

// The common tail of every library check: "<call> failed at <file:line>[ (<op>)]: <why>".
[[noreturn]] inline void throw_call_error(const char* call, const char* file, int line,
                                          std::string_view op, std::string_view why) {
  throw_error(call_name(call), " failed at ", source_path(file), ":", line,
              op.empty() ? std::string() : " (" + std::string(op) + ")", ": ", why);
}

inline void check_cuda(cudaError_t e, const char* call, const char* file, int line,
                       std::string_view op = {}) {
  if (e != cudaSuccess) throw_call_error(call, file, line, op, cudaGetErrorString(e));
}

}  // namespace fsdp

// FSDP_CUDA_CHECK(call) or FSDP_CUDA_CHECK(call, op): op is any string naming
// what the call was for (a kernel, a GEMM shape, a buffer).
#define FSDP_CUDA_CHECK(call, ...) \
  ::fsdp::check_cuda((call), #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
// After a kernel launch: a bad launch configuration is reported here, naming
// the kernel, not at some later call.
#define FSDP_LAUNCH_CHECK(kernel) \
  ::fsdp::check_cuda(cudaGetLastError(), "kernel launch", __FILE__, __LINE__, kernel)
