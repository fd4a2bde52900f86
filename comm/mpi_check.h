// Turns an MPI return code into fsdp::Error naming the call. Only meaningful on
// communicators whose error handler is MPI_ERRORS_RETURN; on the others MPI
// aborts before returning.
#pragma once

#include <mpi.h>

#include <string>

#include "common/error.h"

namespace fsdp {

inline void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  throw_error(call, " failed: ", len > 0 ? std::string(text, len) : "unknown MPI error ",
              len > 0 ? "" : std::to_string(rc));
}

}  // namespace fsdp
