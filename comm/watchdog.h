// MPI has no timeout: a collective whose peer is stopped, deadlocked or stuck
// on a dead file system waits forever, and so does every rank behind it. The
// watchdog turns that into an error, as NcclWatchdog does on the GPU. Code
// that waits on peers (a collective, a collective HDF5 save or load) opens a
// WatchScope naming what it waits for; a monitor thread that finds a scope
// open longer than the limit prints one line naming this rank and the
// operation and aborts the job (MPI_Abort), so every rank exits within about
// the limit. Scopes cover waits on peers only, never whole steps, so a long
// but healthy computation cannot trip it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace fsdp {

// A scope's own limit, shorter than the watchdog's: a set-up wait bounded
// by a setting of its own (NCCL's init timeout), named in the message.
struct WatchLimit {
  double seconds = 0;  // 0: the watchdog's limit (FSDP_COLLECTIVE_TIMEOUT_S)
  const char* setting = "FSDP_COLLECTIVE_TIMEOUT_S";
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // Runs once, on the monitor thread, with the message (no "fsdptrain:
  // error:" prefix). The process-wide watchdog's handler prints it and aborts
  // the job; tests inject one that records.
  using Handler = std::function<void(const std::string& message)>;

  // `poll_s` <= 0 starts no thread: the caller drives check() (tests).
  Watchdog(int rank, double limit_s, double poll_s, Handler on_expiry);
  ~Watchdog();  // stops and joins the thread; never fires
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // `limit`: the scope's own (see WatchLimit), else the watchdog's.
  uint64_t enter(std::string what, WatchLimit limit = {});
  void leave(uint64_t id);

  // Fires the handler (at most once per watchdog) when the oldest open scope
  // past its limit at `now` has been open longer than it; returns whether
  // it fired.
  bool check(Clock::time_point now);

  // This process did not run for `d` (SIGSTOP, a suspended machine): that
  // time does not count against open scopes. Without this, a rank stopped
  // and then woken by mpirun's SIGCONT to be killed would find its own
  // scopes expired and blame its peers for its own stop.
  void did_not_run(Clock::duration d);

  double limit_s() const { return limit_.count(); }

 private:
  struct Scope {
    std::string what;
    Clock::time_point entered;
    std::chrono::duration<double> limit;
    const char* setting;
  };

  void run();

  int rank_;
  std::chrono::duration<double> limit_, poll_;
  Handler on_expiry_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Scope> open_;  // ids grow, so the first entry is the oldest
  uint64_t next_id_ = 1;
  std::string last_completed_;
  bool fired_ = false, stop_ = false;
  std::thread thread_;
};

// FSDP_COLLECTIVE_TIMEOUT_S, or 600 when unset; throws fsdp::Error naming the
// variable when it is not a positive, finite number of seconds.
double collective_timeout_from_env();

// The process-wide watchdog that WatchScope(what) uses; until it is started
// (and in programs that never start it, such as unit tests) those scopes
// watch nothing. Start once, before any other thread runs.
void start_collective_watchdog(int rank, double limit_s);

class WatchScope {
 public:
  // On the process-wide watchdog.
  explicit WatchScope(std::string what, WatchLimit limit = {});
  WatchScope(Watchdog& watchdog, std::string what, WatchLimit limit = {});
  ~WatchScope();
  WatchScope(const WatchScope&) = delete;
  WatchScope& operator=(const WatchScope&) = delete;
  // Whether a watchdog times this scope: the process-wide one only once
  // start_collective_watchdog ran.
  bool watching() const { return watchdog_ != nullptr; }

 private:
  Watchdog* watchdog_;
  uint64_t id_ = 0;
};

}  // namespace fsdp
