// Which GPU a rank takes (comm/device.h): pure, so checked without a GPU.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fsdp
