// Turns CUDA and NCCL failures into fsdp::Error naming the call that failed.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "common/error.h"

namespace fsdp {

// "cudaEventRecord(ev, stream_)" -> "cudaEventRecord": the name is what a
// user can search for; the arguments mean nothing to them.
inline std::string_view call_name(std::string_view call) {
  return call.substr(0, call.find('('));
}

inline void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw_error(call_name(call), " failed: ", cudaGetErrorString(e));
}

inline void check_nccl(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  // NCCL keeps a more specific explanation than the error class.
  const char* detail = ncclGetLastError(comm);
  throw_error(call_name(call), " failed: ", ncclGetErrorString(r),
              detail && *detail ? std::string(" (") + detail + ")" : std::string());
}

}  // namespace fsdp

#define FSDP_CUDA_CHECK(call) ::fsdp::check_cuda((call), #call)
#define FSDP_NCCL_CHECK(call, comm) ::fsdp::check_nccl((call), #call, (comm))
