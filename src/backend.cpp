#include "src/backend.h"

#include "common/error.h"
#include "model/cpu/cpu_ops.h"

namespace fsdp {

std::string resolve_device(const Options& o) {
  // The CUDA backend (model/cuda) is not wired in yet, so auto means cpu; say
  // so rather than fail, and refuse an explicit request.
  if (o.device == "cuda")
    throw_error(
        "--device cuda: the CUDA backend is not available in this build yet; "
        "use --device cpu");
  if (o.precision != "fp32")
    throw_error("--precision ", o.precision,
                ": the CPU reference computes in fp32 only; use --precision fp32");
  if (o.debug) throw_error("--debug: the single-GPU debug mode needs the CUDA backend");
  return "cpu";
}

std::unique_ptr<Ops> make_ops(const std::string& device, const Options&) {
  FSDP_CHECK(device == "cpu");
  return std::make_unique<CpuOps>();
}

}  // namespace fsdp
