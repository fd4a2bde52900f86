#include "comm/agree.h"

#include <exception>
#include <string>

#include "comm/watchdog.h"

namespace fsdp {

void all_or_none(MPI_Comm comm, const std::function<void()>& step) {
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  int mine = failure ? 1 : 0, any = 0;
  {
    WatchScope watch("agreeing on a set-up step's outcome (all_or_none)");
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
  }
  if (failure) std::rethrow_exception(failure);
  if (any) throw PeerFailed();
}

}  // namespace fsdp
