#include "comm/watchdog.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "common/error.h"

namespace fsdp {

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// The job cannot go on: a peer will never arrive. MPI_Abort from this thread
// while the main thread sits in MPI_Wait is outside MPI_THREAD_SERIALIZED,
// but it is the one call meant to end a job from anywhere (the NCCL watchdog
// does the same); _Exit covers an MPI whose abort returns, and mpirun then
// ends the job because a rank exited without MPI_Finalize.
[[noreturn]] void abort_job(const std::string& message) {
  std::fprintf(stderr, "fsdptrain: error: %s\n", message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// Set once in main before other threads exist and never freed, so scopes on
// the reader thread or during exit never see it dangle.
std::atomic<Watchdog*> g_watchdog{nullptr};

}  // namespace

Watchdog::Watchdog(int rank, double limit_s, double poll_s, Handler on_expiry)
    : rank_(rank), limit_(limit_s), poll_(poll_s), on_expiry_(std::move(on_expiry)) {
  if (poll_s > 0) thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

uint64_t Watchdog::enter(std::string what, WatchLimit limit) {
  const auto scope_limit =
      limit.seconds > 0 ? std::chrono::duration<double>(limit.seconds) : limit_;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_id_++;
  open_.emplace(id, Scope{std::move(what), Clock::now(), scope_limit,
                          limit.seconds > 0 ? limit.setting : "FSDP_COLLECTIVE_TIMEOUT_S"});
  return id;
}

void Watchdog::leave(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  last_completed_ = std::move(it->second.what);
  open_.erase(it);
}

bool Watchdog::check(Clock::time_point now) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_) return false;
    const Scope* expired = nullptr;
    for (const auto& [id, scope] : open_)  // oldest first: ids grow
      if (now - scope.entered > scope.limit) {
        expired = &scope;
        break;
      }
    if (!expired) return false;
    fired_ = true;
    // Which peer never arrived cannot be learnt from here without talking to
    // it, and a stopped peer cannot answer; what each rank can say for sure
    // is what it was waiting in, and the ranks that time out print that.
    message = "rank " + std::to_string(rank_) + ": " + expired->what + " did not complete in " +
              seconds_text(expired->limit.count()) + " s (" + expired->setting + ")";
    const Scope& newest = open_.rbegin()->second;
    if (&newest != expired) message += ", waiting in " + newest.what;
    message +=
        "; a peer rank is dead or hung (stopped, deadlocked or stuck on I/O), or this rank's "
        "I/O is stuck";
    if (!last_completed_.empty()) message += "; its last completed wait was " + last_completed_;
    message += "; aborting the job";
  }
  on_expiry_(message);
  return true;
}

void Watchdog::did_not_run(Clock::duration d) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, scope] : open_) scope.entered += d;
}

void Watchdog::run() {
  // A poll that comes far later than asked means the process was stopped;
  // a loaded machine delays a wake-up by milliseconds, not a second.
  const auto slack = std::chrono::duration_cast<Clock::duration>(poll_) + std::chrono::seconds(1);
  auto last = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, poll_, [this] { return stop_; });
    if (stop_) break;
    lock.unlock();
    const auto now = Clock::now();
    if (now - last > slack)
      did_not_run(now - last - std::chrono::duration_cast<Clock::duration>(poll_));
    last = now;
    check(now);
    lock.lock();
  }
}

double collective_timeout_from_env() {
  const char* name = "FSDP_COLLECTIVE_TIMEOUT_S";
  const char* v = std::getenv(name);
  if (!v || !*v) return 600;
  char* end = nullptr;
  errno = 0;
  const double t = std::strtod(v, &end);
  if (errno != 0 || *end != '\0' || !(t > 0) || !std::isfinite(t))
    throw_error(name, "=", v,
                " is not a positive number of seconds (how long a rank may wait for its peers "
                "before the job is aborted; default 600)");
  return t;
}

void start_collective_watchdog(int rank, double limit_s) {
  if (g_watchdog.load()) return;
  // A tenth of the limit keeps the overshoot small, at most one poll a second.
  const double poll_s = std::min(1.0, limit_s / 10);
  g_watchdog.store(new Watchdog(rank, limit_s, poll_s, abort_job));
}

WatchScope::WatchScope(std::string what, WatchLimit limit) : watchdog_(g_watchdog.load()) {
  if (watchdog_) id_ = watchdog_->enter(std::move(what), limit);
}

WatchScope::WatchScope(Watchdog& watchdog, std::string what, WatchLimit limit)
    : watchdog_(&watchdog) {
  id_ = watchdog_->enter(std::move(what), limit);
}

WatchScope::~WatchScope() {
  if (watchdog_) watchdog_->leave(id_);
}

}  // namespace fsdp
