// Test-only hooks that make one rank misbehave on purpose, so that the fault
// paths (watchdogs, timeouts, agreement) can be shown on real launchers and
// real NCCL. Nothing here runs unless its FSDP_TEST_* variable is set; users
// never set them. Header-only, like the rest of common/, so that comm/ (NCCL
// set-up) and src/ (the step loop) share one reading of the variable.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/error.h"

namespace fsdp::test_hooks {

// FSDP_TEST_STALL=WHO:WHERE: world rank WHO stops calling collectives at
// WHERE and sleeps until it is killed, as a hung rank does:
//   init  in the set-up of the device communicators: with NCCL after the
//         unique id was shared and before ncclCommInitRankConfig (its peers
//         then wait in NCCL's init and its timeout); otherwise (the CPU,
//         --device-comm staged) before the process groups are made (in MPI)
//   N     at the start of step N (1-based, as progress lines count), before
//         its first micro-batch (its peers wait in a collective of step N)
struct Stall {
  int rank = -1;  // -1: no stall asked for
  bool at_init = false;
  int64_t step = -1;
};

// Throws fsdp::Error for a malformed value (every rank reads the same one).
inline Stall parse_stall(const std::string& spec) {
  Stall s;
  const size_t colon = spec.find(':');
  const std::string who = spec.substr(0, colon),
                    where = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const auto number = [](const std::string& t) {
    return !t.empty() && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (!number(who) || (where != "init" && (!number(where) || std::atoll(where.c_str()) < 1)))
    throw_error("FSDP_TEST_STALL '", spec, "': WHO:WHERE, a world rank and 'init' or a step >= 1");
  s.rank = std::atoi(who.c_str());
  s.at_init = where == "init";
  if (!s.at_init) s.step = std::atoll(where.c_str());
  return s;
}

inline const Stall& stall_spec() {
  static const Stall s = [] {
    const char* v = std::getenv("FSDP_TEST_STALL");
    return v && *v ? parse_stall(v) : Stall{};
  }();
  return s;
}

[[noreturn]] inline void stall_forever(int rank, const std::string& where) {
  std::fprintf(stderr, "fsdptrain: test: rank %d stalls %s (FSDP_TEST_STALL)\n", rank,
               where.c_str());
  std::fflush(stderr);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
}

// Never returns on the rank FSDP_TEST_STALL names, at its point.
inline void stall_at_init(int world_rank) {
  const Stall& s = stall_spec();
  if (s.rank == world_rank && s.at_init) stall_forever(world_rank, "in communicator set-up");
}
inline void stall_at_step(int world_rank, int64_t step) {
  const Stall& s = stall_spec();
  if (s.rank == world_rank && s.step == step)
    stall_forever(world_rank, "at the start of step " + std::to_string(step));
}

}  // namespace fsdp::test_hooks
