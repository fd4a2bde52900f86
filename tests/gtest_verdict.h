// What a GoogleTest binary tells CTest, beyond pass or fail: CTest knows one
// verdict per entry, so a binary whose every case skipped (a GPU suite
// without a GPU, a case that needs more ranks than its entry runs) must exit
// 77, which the entries declare as SKIP_RETURN_CODE, or it shows as Passed.
// A binary where only some cases skipped passes, and says which on one line
// that tools/test.sh gathers after the run ("fsdp-test: skipped ...").
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace fsdp::testing {

inline constexpr int kSkippedExit = 77;

// The cases of the last RUN_ALL_TESTS that skipped, grouped by reason:
// "reason: Suite.A, Suite.B and 11 more; other reason: Suite.C".
inline std::string skipped_cases() {
  std::vector<std::pair<std::string, std::vector<std::string>>> by_reason;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& info = *suite.GetTestInfo(t);
      if (!info.should_run() || !info.result()->Skipped()) continue;
      std::string why = "no reason given";
      for (int p = 0; p < info.result()->total_part_count(); ++p)
        if (info.result()->GetTestPartResult(p).skipped() &&
            *info.result()->GetTestPartResult(p).message())
          why = info.result()->GetTestPartResult(p).message();
      auto it = std::find_if(by_reason.begin(), by_reason.end(),
                             [&](const auto& r) { return r.first == why; });
      if (it == by_reason.end()) it = by_reason.insert(by_reason.end(), {why, {}});
      it->second.push_back(std::string(suite.name()) + "." + info.name());
    }
  }
  std::string out;
  for (const auto& [why, names] : by_reason) {
    out += (out.empty() ? "" : "; ") + why + ": ";
    for (size_t i = 0; i < names.size() && i < 2; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 2) out += " and " + std::to_string(names.size() - 2) + " more";
  }
  return out;
}

// failed: the run's verdict; label: what the line names (the binary, and the
// rank count under mpirun). Prints the skip line when `print`.
inline int verdict(bool failed, const std::string& label, bool print = true) {
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  const int skipped = unit.skipped_test_count(), ran = unit.test_to_run_count();
  if (failed) return 1;
  if (skipped == 0) return 0;
  if (print && skipped < ran)
    std::printf("fsdp-test: skipped %d of %d case(s) of %s: %s\n", skipped, ran, label.c_str(),
                skipped_cases().c_str());
  else if (print)
    std::printf("fsdp-test: all %d case(s) of %s skipped: %s\n", ran, label.c_str(),
                skipped_cases().c_str());
  return skipped == ran ? kSkippedExit : 0;
}

}  // namespace fsdp::testing
