#include "comm/device.h"
#include "common/error.h"

namespace fsdp {

int choose_device(const WorldInfo& world, int visible, bool shared) {
  if (visible <= 0)
    throw_error("rank ", world.rank, " on node ", world.node,
                " sees no CUDA device: run on a GPU node (check CUDA_VISIBLE_DEVICES), "
                "or use --device cpu");
  if (visible == 1) return 0;
  if (shared) return world.local_rank % visible;
  if (world.local_size > visible)
    throw_error(world.local_size, " ranks share node ", world.node, " but it has only ", visible,
                " visible GPUs: launch one rank per GPU (and check CUDA_VISIBLE_DEVICES), or "
                "test with --device-comm staged");
  return world.local_rank;
}

}  // namespace fsdp
