// The collective watchdog decides on times it is given (check(now)), so these
// tests hand it times instead of sleeping; one test runs the real monitor
// thread, bounded by a generous wait, never asserting on durations.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "comm/watchdog.h"
#include "common/error.h"

namespace fsdp {
namespace {

using namespace std::chrono_literals;
using Clock = Watchdog::Clock;

struct Recorder {
  std::vector<std::string> messages;
  Watchdog::Handler handler() {
    return [this](const std::string& m) { messages.push_back(m); };
  }
};

TEST(Watchdog, ScopeOpenPastTheLimitCallsTheHandlerOnce) {
  Recorder r;
  Watchdog w(3, 10.0, 0, r.handler());
  WatchScope scope(w, "MPI all_reduce #7 (2 f32) on a group of 3 rank(s)");
  const auto t = Clock::now();
  EXPECT_FALSE(w.check(t + 5s));
  EXPECT_TRUE(r.messages.empty());
  EXPECT_TRUE(w.check(t + 11s));
  ASSERT_EQ(r.messages.size(), 1u);
  const std::string& m = r.messages[0];
  EXPECT_NE(m.find("rank 3: MPI all_reduce #7"), std::string::npos) << m;
  EXPECT_NE(m.find("did not complete in 10 s"), std::string::npos) << m;
  EXPECT_NE(m.find("dead or hung"), std::string::npos) << m;
  EXPECT_FALSE(w.check(t + 20s));  // the job is being aborted; one line is enough
  EXPECT_EQ(r.messages.size(), 1u);
}

TEST(Watchdog, ScopeThatEndsInTimeNeverFires) {
  Recorder r;
  Watchdog w(0, 10.0, 0, r.handler());
  { WatchScope scope(w, "MPI barrier #1 on a group of 2 rank(s)"); }
  EXPECT_FALSE(w.check(Clock::now() + 1h));
  EXPECT_TRUE(r.messages.empty());
}

TEST(Watchdog, NamesTheOldestScopeWhatItWaitsInAndTheLastCompleted) {
  Recorder r;
  Watchdog w(1, 10.0, 0, r.handler());
  { WatchScope done(w, "MPI all_reduce #4"); }
  WatchScope save(w, "checkpoint save of step 6");
  WatchScope inner(w, "MPI all_reduce #5");
  EXPECT_TRUE(w.check(Clock::now() + 11s));
  ASSERT_EQ(r.messages.size(), 1u);
  const std::string& m = r.messages[0];
  EXPECT_NE(m.find("rank 1: checkpoint save of step 6 did not complete"), std::string::npos) << m;
  EXPECT_NE(m.find("waiting in MPI all_reduce #5"), std::string::npos) << m;
  EXPECT_NE(m.find("last completed wait was MPI all_reduce #4"), std::string::npos) << m;
}

// A set-up wait bounded by a setting of its own (NCCL's init timeout) fires
// at its limit and names that setting, while scopes around it keep theirs.
TEST(Watchdog, AScopeWithItsOwnLimitFiresAtItAndNamesItsSetting) {
  Recorder r;
  Watchdog w(0, 600.0, 0, r.handler());
  WatchScope outer(w, "checkpoint load");
  WatchScope agree(w, "agreeing on a set-up step's outcome", {20.0, "FSDP_NCCL_INIT_TIMEOUT_S"});
  const auto t = Clock::now();
  EXPECT_FALSE(w.check(t + 19s));
  EXPECT_TRUE(w.check(t + 21s));
  ASSERT_EQ(r.messages.size(), 1u);
  const std::string& m = r.messages[0];
  EXPECT_NE(m.find("rank 0: agreeing on a set-up step's outcome did not complete in 20 s "
                   "(FSDP_NCCL_INIT_TIMEOUT_S)"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("waiting in"), std::string::npos) << "the expired scope is the newest: " << m;
}

TEST(Watchdog, ScopesWithoutTheirOwnLimitKeepTheWatchdogs) {
  Recorder r;
  Watchdog w(0, 10.0, 0, r.handler());
  WatchScope longer(w, "a long set-up wait", {100.0, "SOME_LIMIT_S"});
  WatchScope ordinary(w, "MPI all_reduce #3");
  const auto t = Clock::now();
  EXPECT_TRUE(w.check(t + 11s));
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_NE(r.messages[0].find("MPI all_reduce #3 did not complete in 10 s "
                               "(FSDP_COLLECTIVE_TIMEOUT_S)"),
            std::string::npos)
      << r.messages[0];
}

TEST(Watchdog, TimeThisProcessDidNotRunDoesNotCount) {
  Recorder r;
  Watchdog w(2, 10.0, 0, r.handler());
  WatchScope scope(w, "MPI all_reduce #9");
  const auto t = Clock::now();
  w.did_not_run(std::chrono::seconds(20));  // SIGSTOPped, then woken
  EXPECT_FALSE(w.check(t + 21s));
  EXPECT_TRUE(r.messages.empty());
  EXPECT_TRUE(w.check(t + 31s));  // still fires once its own waiting passes the limit
}

TEST(Watchdog, ScopesWithoutAStartedWatchdogWatchNothing) {
  // Unit tests never start the process-wide watchdog: scopes must be inert.
  WatchScope scope("nothing");
  EXPECT_FALSE(scope.watching());
  Watchdog w(0, 60, 0, [](const std::string&) {});  // poll 0: no monitor thread
  WatchScope given(w, "something");
  EXPECT_TRUE(given.watching());
}

TEST(Watchdog, MonitorThreadFiresOnAStuckScope) {
  std::mutex mu;
  std::condition_variable cv;
  std::string message;
  Watchdog w(2, 0.05, 0.01, [&](const std::string& m) {
    std::lock_guard<std::mutex> lock(mu);
    message = m;
    cv.notify_all();
  });
  WatchScope scope(w, "a wait that never ends");
  std::unique_lock<std::mutex> lock(mu);
  // A bound against a broken thread, not a timing assertion.
  cv.wait_for(lock, 60s, [&] { return !message.empty(); });
  EXPECT_NE(message.find("rank 2: a wait that never ends did not complete"), std::string::npos)
      << message;
}

TEST(Watchdog, LimitFromTheEnvironment) {
  const char* name = "FSDP_COLLECTIVE_TIMEOUT_S";
  const char* old = std::getenv(name);
  const std::string saved = old ? old : "";
  unsetenv(name);
  EXPECT_EQ(collective_timeout_from_env(), 600);
  setenv(name, "2.5", 1);
  EXPECT_EQ(collective_timeout_from_env(), 2.5);
  for (const char* bad : {"soon", "-1", "0", "inf", "nan", "5s"}) {
    setenv(name, bad, 1);
    try {
      collective_timeout_from_env();
      ADD_FAILURE() << bad << " accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "=" + bad), std::string::npos)
          << e.what();
    }
  }
  if (old)
    setenv(name, saved.c_str(), 1);
  else
    unsetenv(name);
}

}  // namespace
}  // namespace fsdp
