// The driver-too-old line (common/cuda_driver.h): pure, so checked without a GPU.
#include <gtest/gtest.h>

#include "common/cuda_driver.h"

namespace fsdp {
namespace {

TEST(CudaDriver, VersionText) {
  EXPECT_EQ(cuda_version_text(12040), "12.4");
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12080), "12.8");
}

TEST(CudaDriver, NoDriverIsNoGpuNotAnError) {
  EXPECT_EQ(driver_too_old_message(0, 13000), "");
}

// An R550 driver (CUDA 12.4) under a CUDA 13 build: the line names both
// versions and the CUDA 12 build.
TEST(CudaDriver, OlderMajorPointsAtTheCuda12Build) {
  const std::string m = driver_too_old_message(12040, 13000);
  EXPECT_NE(m.find("supports CUDA up to 12.4"), std::string::npos) << m;
  EXPECT_NE(m.find("the CUDA 13.0 this fsdptrain was built with"), std::string::npos) << m;
  EXPECT_NE(m.find("build it with a CUDA 12 toolkit"), std::string::npos) << m;
}

// Same major, driver below the minor-version floor: only a driver update helps.
TEST(CudaDriver, SameMajorAsksForADriverUpdate) {
  const std::string m = driver_too_old_message(12000, 12040);
  EXPECT_NE(m.find("update the driver"), std::string::npos) << m;
  EXPECT_EQ(m.find("build it with"), std::string::npos) << m;
}

// A CUDA 11 driver cannot run any build: no toolkit it runs compiles sm_90a.
TEST(CudaDriver, Cuda11DriverAsksForADriverUpdate) {
  const std::string m = driver_too_old_message(11080, 12040);
  EXPECT_NE(m.find("supports CUDA up to 11.8"), std::string::npos) << m;
  EXPECT_NE(m.find("update the driver (fsdptrain needs CUDA 12 or newer"), std::string::npos) << m;
  EXPECT_EQ(m.find("build it with"), std::string::npos) << m;
}

}  // namespace
}  // namespace fsdp
