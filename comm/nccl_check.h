// Failed NCCL calls as fsdp::Error naming the call, its call site and NCCL's
// own explanation (ncclGetLastError), in the style of common/cuda_check.h.
#pragma once

#include <nccl.h>

#include <string>

// The process groups split the world communicator (ncclCommSplit, NCCL 2.18);
// an older nccl.h would fail further on with "ncclCommSplit was not declared".
#if !defined(NCCL_VERSION_CODE) || NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "fsdptrain needs NCCL 2.18 or newer (ncclCommSplit); point NCCL_HOME at a newer NCCL"
#endif

#include "common/cuda_check.h"

namespace fsdp {

inline void check_nccl(ncclResult_t r, const char* call, const char* file, int line,
                       ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return;
  // NCCL keeps a more specific explanation than the error class.
  const char* detail = ncclGetLastError(comm);
  throw_call_error(call, file, line, {},
                   std::string(ncclGetErrorString(r)) +
                       (detail && *detail ? std::string(" (") + detail + ")" : std::string()));
}

}  // namespace fsdp

#define FSDP_NCCL_CHECK(call, comm) ::fsdp::check_nccl((call), #call, __FILE__, __LINE__, (comm))
