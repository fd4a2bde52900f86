// GoogleTest main for the single-process suites: gtest_main's, but a binary
// whose every case skipped exits 77 (CTest: Skipped) and partial skips are
// named on one line (tests/gtest_verdict.h).
#include <gtest/gtest.h>

#include <string>

#include "tests/gtest_verdict.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const bool failed = RUN_ALL_TESTS() != 0;
  std::string name = argv[0];
  name = name.substr(name.find_last_of('/') + 1);
  return fsdp::testing::verdict(failed, name);
}
