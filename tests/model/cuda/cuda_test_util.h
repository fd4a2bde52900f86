// Shared by the CUDA parity tests: the host helpers of tensor_io.h plus the
// GoogleTest side: a relative-L2 expectation that NaN never passes, a bitwise
// one, and the skip that keeps every GPU suite green on a machine without one.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "model/cuda/cuda_ops.h"
#include "tests/model/op_table/tensor_io.h"

namespace fsdp::test {

// why: the tolerance's reason, printed when the check fails.
inline void expect_rel(const char* what, const std::vector<float>& got,
                       const std::vector<float>& want, double tol, const char* why = nullptr) {
  const double e = rel_l2(got, want);
  std::printf("  %-34s rel L2 err %.2e (tol %.2g)\n", what, e, tol);
  EXPECT_LE(e, tol) << what << (why ? " (tolerance: " : "") << (why ? why : "") << (why ? ")" : "");
}

// Bitwise equality (NaN never equals anything), naming the first mismatch
// instead of printing two long vectors.
inline void expect_same(const char* what, const std::vector<float>& got,
                        const std::vector<float>& want) {
  size_t bad = 0, first = 0;
  const bool sizes_match = got.size() == want.size();
  for (size_t i = 0; sizes_match && i < got.size(); ++i)
    if (!(got[i] == want[i]) && bad++ == 0) first = i;
  std::printf("  %-34s %s\n", what, sizes_match && bad == 0 ? "exact" : "DIFFERS");
  EXPECT_TRUE(sizes_match) << what << ": " << got.size() << " elements, want " << want.size();
  if (sizes_match) {
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size()
                       << " elements differ, first at " << first << ": " << got[first] << " vs "
                       << want[first];
  }
}

inline bool have_gpu() {
  return cuda_device_count() > 0;
}

}  // namespace fsdp::test

#define FSDP_SKIP_WITHOUT_GPU() \
  if (!::fsdp::test::have_gpu()) GTEST_SKIP() << "no CUDA device: GPU parity tests skipped"
