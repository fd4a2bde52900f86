// Picks the compute backend for --device/--precision. Everything here is
// decided before any data is read onto a device.
#pragma once

#include <memory>
#include <string>

#include "model/ops.h"
#include "src/options.h"

namespace fsdp {

// "cpu" or "cuda"; throws fsdp::Error for a combination this build cannot run.
std::string resolve_device(const Options& o);
std::unique_ptr<Ops> make_ops(const std::string& device, const Options& o);

}  // namespace fsdp
