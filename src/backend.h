// Picks the compute backend for --device/--precision. Decided after flags and
// data are checked and before anything is put on a device.
#pragma once

#include <memory>
#include <string>

#include "comm/runtime.h"
#include "model/ops.h"
#include "src/options.h"

namespace fsdp {

// "cpu" or "cuda"; throws fsdp::Error for a combination this build or
// machine cannot run.
std::string resolve_device(const Options& o);
// For cuda, also makes the node-local GPU (by local rank) current.
std::unique_ptr<Ops> make_ops(const std::string& device, const Options& o, const WorldInfo& world);

}  // namespace fsdp
