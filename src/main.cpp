// fsdptrain: pretrain a GPT-style model with fully sharded data parallelism.
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "comm/agree.h"
#include "comm/launch.h"
#include "comm/runtime.h"
#include "comm/watchdog.h"
#include "common/error.h"
#include "src/options/options.h"
#include "src/policy/stop_signal.h"
#include "src/trainer/trainer.h"

namespace {

// Set-up errors (flags, files, data) happen on every rank alike or on some;
// the ranks agree so that exactly one line is printed, by the lowest rank
// with a real error (ranks that only saw a peer fail stay quiet), and all
// exit non-zero instead of some waiting forever.
bool agree_ok(bool ok, bool peer_only, const std::string& message, int rank) {
  const int none = 1 << 30;
  int mine[2] = {ok || peer_only ? none : rank, ok ? none : rank}, first[2] = {0, 0};
  {
    fsdp::WatchScope watch("agreeing on the set-up's outcome");
    MPI_Allreduce(mine, first, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  }
  const int printer = first[0] != none ? first[0] : first[1];
  if (!ok && printer == rank) std::fprintf(stderr, "fsdptrain: error: %s\n", message.c_str());
  return first[1] == none;
}

}  // namespace

int main(int argc, char** argv) {
  const fsdp::LaunchEnv launch = fsdp::read_launch_env();  // before MPI sets any of it
  fsdp::MpiRuntime mpi(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // From here a stop signal during set-up (a long resume) sets the flag the
  // first step boundary acts on, instead of killing this rank.
  fsdp::install_stop_handlers();

  std::optional<fsdp::Options> options;
  std::unique_ptr<fsdp::Trainer> trainer;
  std::string message;
  bool peer_only = false;
  try {
    fsdp::start_collective_watchdog(rank, fsdp::collective_timeout_from_env());
    options = fsdp::parse_options(argc, argv);
    if (options) {
      const fsdp::WorldInfo world = fsdp::world_info();
      fsdp::check_launch(world, launch);
      trainer = std::make_unique<fsdp::Trainer>(*options, world);
    }
  } catch (const fsdp::PeerFailed& e) {
    message = e.what();
    peer_only = true;
  } catch (const std::exception& e) {
    message = e.what();
  }
  if (!agree_ok(message.empty(), peer_only, message, rank)) return 1;
  if (!options) return 0;  // --help

  try {
    if (trainer->run().stopped_before_first_step) {
      trainer.reset();
      return fsdp::kExitStoppedBeforeFirstStep;
    }
  } catch (const fsdp::AgreedError& e) {
    // Every rank stopped at the same point for the same reason (e.g. a
    // diverged step): one line, a clean exit, MPI finalised normally.
    if (rank == 0) std::fprintf(stderr, "fsdptrain: error: %s\n", e.what());
    trainer.reset();
    return e.exit_status();
  } catch (const std::exception& e) {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == 1) {
      std::fprintf(stderr, "fsdptrain: error: %s\n", e.what());
      return 1;
    }
    // Mid-run, the other ranks may be inside a collective: abort them all.
    std::fprintf(stderr, "fsdptrain: error: rank %d: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  trainer.reset();
  return 0;
}
