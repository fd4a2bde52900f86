// Test-only hooks, every FSDP_TEST_* variable in one place: they make a rank
// misbehave on purpose (stall, compute a wrong step, run slow, pause inside a
// save) so that the fault paths (watchdogs, timeouts, the rerun check,
// rollback, time budgets, a full disk) can be shown on real launchers and
// real NCCL. Nothing here runs unless its variable is set; users never set
// them. Header-only, like the rest of common/, so that comm/ (NCCL set-up),
// checkpoint/ (saves) and src/ (the step loop) share one reading of each.
//   FSDP_TEST_STALL               Stall (rank, init or step)
//   FSDP_TEST_TRANSIENT_FAULT     StepFaults: one wrong step on one rank, or in the exchange
//   FSDP_TEST_SPIKE_POSITION      StepFaults: a loss spike tied to a data position
//   FSDP_TEST_SLOW_STEPS          slow_step: chosen steps take longer
//   FSDP_TEST_CHECKPOINT_PAUSE_S  pause_in_save: every rank waits inside a save
//   (and _UNTIL)
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
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

// FSDP_TEST_TRANSIENT_FAULT=WHO:POSITION[:grad]: WHO is a world rank, or a
// node name (then the first rank on that node); the step that reads global
// sequence POSITION goes wrong on that rank once: its loss and gradients 10x,
// or (grad) its gradients Inf. WHO = exchange: the reduced loss of that step
// goes wrong once, on every rank alike, their own parts intact
// (tests/src/rerun_test.py).
// FSDP_TEST_SPIKE_POSITION=POSITION: every time a step reads that global
// position, its reduced loss is 10x, a spike tied to the data as a bad
// batch's is, judged by every rank alike (tests/src/rollback_test.py).
struct StepFault {
  float grad_scale = 1.0f;         // this rank's loss scale for the backward
  double local_loss_scale = 1.0;   // this rank's summed loss
  double global_loss_scale = 1.0;  // the reduced loss, on every rank
};

class StepFaults {
 public:
  StepFaults(int world_rank, int local_rank, const std::string& node) : rank_(world_rank) {
    if (const char* p = std::getenv("FSDP_TEST_SPIKE_POSITION")) spike_position_ = std::atoll(p);
    const char* spec = std::getenv("FSDP_TEST_TRANSIENT_FAULT");
    if (!spec) return;
    const std::string s = spec;
    const size_t a = s.find(':'), b = s.find(':', a + 1);
    FSDP_CHECK(a != std::string::npos, "FSDP_TEST_TRANSIENT_FAULT '", s, "': WHO:POSITION[:grad]");
    const std::string who = s.substr(0, a);
    exchange_ = who == "exchange";
    const bool by_rank = !who.empty() && who.find_first_not_of("0123456789") == std::string::npos;
    const bool mine = exchange_ || (by_rank ? std::atoi(who.c_str()) == world_rank
                                            : who == node && local_rank == 0);
    if (!mine) return;
    position_ = std::atoll(s.substr(a + 1, b - a - 1).c_str());
    gradient_only_ = b != std::string::npos && s.substr(b + 1) == "grad";
  }

  // At the start of step `step` (1-based), which reads global sequences
  // [first, first + count): FSDP_TEST_STALL's stall, and what the faults
  // asked for do to this step (all 1 when none).
  StepFault begin_step(int64_t step, int64_t first, int64_t count) {
    stall_at_step(rank_, step);
    const auto reads = [&](int64_t p) { return p >= first && p < first + count; };
    StepFault f;
    const bool fault = reads(position_);
    if (fault) position_ = -1;  // once
    if (fault && !exchange_) {
      f.grad_scale = gradient_only_ ? 1e38f : 10.0f;
      if (!gradient_only_) f.local_loss_scale = 10;
    }
    if (fault && exchange_) f.global_loss_scale = 10;
    if (reads(spike_position_)) f.global_loss_scale *= 10;
    return f;
  }

 private:
  int rank_;
  int64_t position_ = -1, spike_position_ = -1;
  bool gradient_only_ = false;  // an Inf gradient, the loss untouched
  bool exchange_ = false;       // every rank's reduced loss, not one rank's own
};

// FSDP_TEST_SLOW_STEPS=FIRST:LAST:FACTOR: steps FIRST..LAST (1-based) take
// FACTOR times their time, so a test can make the steps after a time
// budget's plan slower than the ones it timed (tests/src/time_budget_test.py).
// Returns the step's seconds: host_s, or host_s x FACTOR after sleeping the
// difference (every clock the budget reads counts it; the arithmetic is
// untouched).
inline double slow_step(int64_t done, double host_s) {
  struct Slow {
    int first = 0, last = -1;
    double factor = 1;
  };
  static const Slow slow = [] {
    Slow t;
    const char* spec = std::getenv("FSDP_TEST_SLOW_STEPS");
    if (!spec) return t;
    FSDP_CHECK(std::sscanf(spec, "%d:%d:%lf", &t.first, &t.last, &t.factor) == 3 && t.factor >= 1,
               "FSDP_TEST_SLOW_STEPS '", spec, "': FIRST:LAST:FACTOR, FACTOR >= 1");
    return t;
  }();
  if (done < slow.first || done > slow.last) return host_s;
  std::this_thread::sleep_for(std::chrono::duration<double>(host_s * (slow.factor - 1)));
  return host_s * slow.factor;
}

// FSDP_TEST_CHECKPOINT_PAUSE_S=N holds every rank for N seconds with the
// .tmp file half written, so a test can kill -9 a rank right there, or fill
// the disk. With FSDP_TEST_CHECKPOINT_PAUSE_UNTIL=PATH the pause ends as soon
// as PATH exists, so such a test need not sleep out all N seconds.
inline void pause_in_save(const std::string& tmp, int rank) {
  const char* s = std::getenv("FSDP_TEST_CHECKPOINT_PAUSE_S");
  if (!s) return;
  if (rank == 0)
    std::fprintf(stderr, "checkpoint: pausing %s s while writing '%s'\n", s, tmp.c_str());
  const char* until = std::getenv("FSDP_TEST_CHECKPOINT_PAUSE_UNTIL");
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(std::atof(s));
  while (std::chrono::steady_clock::now() < end) {
    if (std::error_code ec; until && std::filesystem::exists(until, ec)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace fsdp::test_hooks
