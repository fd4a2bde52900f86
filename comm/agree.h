// Set-up steps that can fail on some ranks only (a file one rank opens, an
// allocation, a device) must not leave the others waiting in the next
// collective. all_or_none runs such a step everywhere and then agrees: the
// ranks whose step failed rethrow their error, the others throw PeerFailed,
// so all leave together and main prints the real error once.
#pragma once

#include <mpi.h>

#include <functional>

#include "comm/watchdog.h"
#include "common/error.h"

namespace fsdp {

class PeerFailed : public Error {
 public:
  PeerFailed() : Error("another rank failed during set-up") {}
};

// Collective over comm. The agreement waits for the peers under the
// collective watchdog, up to `limit` when given (a set-up step with a
// timeout of its own, such as NCCL's init: a peer that never arrives should
// not take the watchdog's much longer limit on top).
void all_or_none(MPI_Comm comm, const std::function<void()>& step, WatchLimit limit = {});

}  // namespace fsdp
