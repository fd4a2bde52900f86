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

void check_gpu_sharing(const std::vector<RankGpu>& ranks, bool shared) {
  if (shared) return;
  for (size_t a = 0; a < ranks.size(); ++a)
    for (size_t b = a + 1; b < ranks.size(); ++b) {
      if (ranks[a].uuid != ranks[b].uuid) continue;
      const std::string &ha = ranks[a].nccl_hostid, &hb = ranks[b].nccl_hostid;
      if (!ha.empty() && !hb.empty() && ha != hb) continue;  // two "nodes" to NCCL
      throw_error(
          "ranks ", a, " and ", b,
          " drive the same GPU, which NCCL does not allow: give each rank its own GPU "
          "(one rank per GPU; check CUDA_VISIBLE_DEVICES), or test with --device-comm "
          "staged, or (tests of NCCL itself) give each rank its own NCCL_HOSTID, as "
          "bench/cuda/nccl_rank.sh does",
          ha.empty() && hb.empty() ? "" : " (their NCCL_HOSTID: '" + ha + "', '" + hb + "')");
    }
}

}  // namespace fsdp
