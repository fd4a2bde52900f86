#include "comm/agree.h"

#include <exception>
#include <string>

#include "comm/watchdog.h"

namespace fsdp {

void all_or_none(MPI_Comm comm, const std::function<void()>& step, WatchLimit limit) {
  std::exception_ptr failure;
  try {
    step();
  } catch (...) {
    failure = std::current_exception();
  }
  int mine = failure ? 1 : 0, any = 0;
  // A peer that never arrives (hung in the same step, say NCCL's init) ends
  // the job through the watchdog, whose one line then carries this rank's
  // own error, which would otherwise never be printed.
  std::string what = "agreeing on a set-up step's outcome (all_or_none)";
  if (failure) try {
      std::rethrow_exception(failure);
    } catch (const std::exception& e) {
      what += " after this rank failed: " + std::string(e.what());
    } catch (...) {
      what += " after this rank failed";
    }
  {
    WatchScope watch(what, limit);
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, comm);
  }
  if (failure) std::rethrow_exception(failure);
  if (any) throw PeerFailed();
}

}  // namespace fsdp
