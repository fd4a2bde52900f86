// Picks the compute backend for --device/--precision. Decided after flags and
// data are checked and before anything is put on a device.
#pragma once

#include <memory>

#include "comm/process_groups.h"
#include "comm/runtime.h"
#include "model/ops.h"
#include "src/options/options.h"

namespace fsdp {

// Device::cpu or Device::cuda, never automatic; throws fsdp::Error for a
// combination this build or machine cannot run.
Device resolve_device(const Options& o);
// For cuda, also makes this rank's GPU current (comm/device.h).
std::unique_ptr<Ops> make_ops(Device device, const Options& o, const WorldInfo& world);
// The process groups the engine's collectives run on: NCCL (cuda) or MPI
// (cpu), or with --device-comm staged MPI through host staging. On cuda, first
// refuses two ranks on one GPU unless staged. `shard_group_size` is resolved
// (resolve_shard_group_size). Collective over MPI_COMM_WORLD.
ProcessGroups make_engine_groups(Device device, const Options& o, int shard_group_size);

}  // namespace fsdp
