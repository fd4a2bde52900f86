// What to tell a user whose NVIDIA driver is older than the CUDA this
// fsdptrain was built with. Without it the CUDA runtime's refusal
// (cudaErrorInsufficientDriver) reads as "no GPU", and --device auto trains on
// the CPU of a GPU node. Clusters on drivers before R580 (R525-R575,
// CUDA 12) meet it with a CUDA 13 build; docs/CLUSTER.md says how to build
// with CUDA 12. Pure, so the CPU tests check it.
#pragma once

#include <string>

namespace fsdp {

// "12.4" from CUDA's 1000 * major + 10 * minor.
inline std::string cuda_version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The error line for a runtime that refused the driver, given both versions
// as cudaDriverGetVersion and cudaRuntimeGetVersion report them; empty when
// there is no driver at all (driver_version 0: a machine without a GPU, where
// the runtime reports the same error).
inline std::string driver_too_old_message(int driver_version, int runtime_version) {
  if (driver_version <= 0) return {};
  const int driver_major = driver_version / 1000;
  std::string what;
  if (driver_major < 12)  // sm_90a, the Hopper code fsdptrain needs, came with CUDA 12.0
    what = "update the driver (fsdptrain needs CUDA 12 or newer: R525 or later)";
  else if (driver_major < runtime_version / 1000)
    what = "build it with a CUDA " + std::to_string(driver_major) +
           " toolkit (docs/CLUSTER.md, \"CUDA 12 clusters\") or update the driver";
  else
    what = "update the driver";
  return "the NVIDIA driver supports CUDA up to " + cuda_version_text(driver_version) +
         ", too old for the CUDA " + cuda_version_text(runtime_version) +
         " this fsdptrain was built with: " + what;
}

}  // namespace fsdp
