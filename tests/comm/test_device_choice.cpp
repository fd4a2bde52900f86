// Which GPU a rank takes (comm/device.h): pure, so checked without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/device.h"
#include "common/error.h"

namespace fsdp {
namespace {

WorldInfo on_node(int local_rank, int local_size) {
  WorldInfo w;
  w.local_rank = local_rank;
  w.local_size = local_size;
  w.rank = local_rank;
  w.size = local_size;
  return w;
}

TEST(ChooseDevice, OneGpuPerLocalRank) {
  for (int r = 0; r < 8; ++r) EXPECT_EQ(choose_device(on_node(r, 8), 8, false), r);
  EXPECT_EQ(choose_device(on_node(1, 2), 4, false), 1);  // spare GPUs are fine
}

TEST(ChooseDevice, ASingleVisibleGpuIsUsedWhateverTheLocalRank) {
  // Per-rank CUDA_VISIBLE_DEVICES or cgroup isolation: each rank sees one GPU.
  for (int r = 0; r < 8; ++r) EXPECT_EQ(choose_device(on_node(r, 8), 1, false), 0);
}

TEST(ChooseDevice, TooFewGpusIsAnErrorUnlessShared) {
  EXPECT_THROW(choose_device(on_node(2, 4), 2, false), Error);
  EXPECT_EQ(choose_device(on_node(2, 4), 2, true), 0);
  EXPECT_EQ(choose_device(on_node(3, 4), 2, true), 1);
}

TEST(ChooseDevice, NoGpuNamesTheWayOut) {
  try {
    choose_device(on_node(0, 1), 0, false);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device cpu"), std::string::npos) << e.what();
  }
}

std::string message_of(const std::vector<RankGpu>& ranks) {
  try {
    check_gpu_sharing(ranks, false);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CheckGpuSharing, OneGpuPerRankIsAccepted) {
  EXPECT_EQ(message_of({{"gpu0", ""}, {"gpu1", ""}, {"gpu2", "h"}, {"gpu3", "h"}}), "");
}

TEST(CheckGpuSharing, TwoRanksOnOneGpuAreRefusedNamingBoth) {
  const std::string m = message_of({{"gpu0", ""}, {"gpu1", ""}, {"gpu1", ""}});
  EXPECT_NE(m.find("ranks 1 and 2 drive the same GPU"), std::string::npos) << m;
  EXPECT_NE(m.find("NCCL_HOSTID"), std::string::npos) << "names the way out for tests: " << m;
  EXPECT_NO_THROW(check_gpu_sharing({{"gpu0", ""}, {"gpu0", ""}}, /*shared=*/true));
}

// NCCL refuses a shared GPU only within one host hash, which NCCL_HOSTID
// sets: each rank its own value makes each a one-GPU node to NCCL.
TEST(CheckGpuSharing, DistinctNcclHostIdsLetRanksShareAGpu) {
  EXPECT_EQ(message_of({{"gpu0", "r0"}, {"gpu0", "r1"}, {"gpu0", "r2"}, {"gpu0", "r3"}}), "");
  // the same value, or a rank without one, is still one host to NCCL
  std::string m = message_of({{"gpu0", "r0"}, {"gpu0", "r1"}, {"gpu0", "r1"}});
  EXPECT_NE(m.find("ranks 1 and 2"), std::string::npos) << m;
  EXPECT_NE(m.find("'r1', 'r1'"), std::string::npos) << m;
  m = message_of({{"gpu0", "r0"}, {"gpu0", ""}});
  EXPECT_NE(m.find("ranks 0 and 1"), std::string::npos) << m;
  // ranks on other GPUs may share a value (one real node)
  EXPECT_EQ(message_of({{"gpu0", "a"}, {"gpu0", "b"}, {"gpu1", "a"}, {"gpu2", "a"}}), "");
}

}  // namespace
}  // namespace fsdp
