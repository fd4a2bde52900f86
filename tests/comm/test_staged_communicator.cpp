// The staged communicator (several ranks on one GPU) with a host stager: every
// collective checked as the MPI one is, plus what only it does (bf16, staging
// before MPI so in-place gathers work, groups). The CUDA stager is the same
// two copies with cudaMemcpy; on a GPU it runs inside fsdptrain --device-comm
// staged (bench/cuda/run_gpu_checks.sh, checks d2 and d3).
#include "comm/staged_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <tuple>
#include <vector>

#include "comm/process_groups.h"
#include "common/error.h"
#include "tests/comm/collective_checks.h"

namespace fsdp {
namespace {

using namespace fsdp::testing;

// Counts what crosses the staging boundary, to prove the collectives go
// through the stager and not around it.
class CountingStager final : public Stager {
 public:
  void wait_stream(StreamHandle) override { ++waits; }
  void to_host(void* host, const void* src, size_t bytes) override {
    host_bytes += bytes;
    if (bytes) std::memcpy(host, src, bytes);
  }
  void to_device(void* dst, const void* host, size_t bytes) override {
    device_bytes += bytes;
    if (bytes) std::memcpy(dst, host, bytes);
  }
  size_t host_bytes = 0, device_bytes = 0, waits = 0;
};

std::unique_ptr<StagedCommunicator> host_staged() {
  return std::make_unique<StagedCommunicator>(MPI_COMM_WORLD, std::make_shared<HostStager>());
}

class StagedCollectives : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(StagedCollectives, MatchDirectComputation) {
  auto c = host_staged();
  auto [dtype, n] = GetParam();
  if (dtype == DType::f32)
    check_everything<float>(*c, n);
  else
    check_everything<int32_t>(*c, n);
}

INSTANTIATE_TEST_SUITE_P(Counts, StagedCollectives,
                         ::testing::Combine(::testing::Values(DType::f32, DType::i32),
                                            ::testing::Values(size_t(0), size_t(1), size_t(7),
                                                              size_t(100003))),
                         dtype_count_name);

TEST(StagedCommunicator, Bf16GathersAndReduces) {
  auto c = host_staged();
  const int p = c->size(), me = c->rank();
  const size_t n = 5;
  std::vector<uint16_t> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = to_bf16(value<float>(me, i));
  std::vector<uint16_t> all(p * n);
  c->all_gather(mine.data(), all.data(), n, DType::bf16)->wait();
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(from_bf16(all[r * n + i]), value<float>(r, i)) << "gather rank " << r << " i " << i;

  // Everyone's full vector; rank r gets the sum of block r, and the average.
  std::vector<uint16_t> send(p * n);
  for (size_t i = 0; i < send.size(); ++i) send[i] = to_bf16(value<float>(me, i));
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max}) {
    std::vector<uint16_t> got(n);
    c->reduce_scatter(send.data(), got.data(), n, DType::bf16, op)->wait();
    for (size_t i = 0; i < n; ++i) {
      const float want = reduce_over_ranks<float>(p, me * n + i, op);
      // Sums of small integers are exact in bf16; averages round once.
      EXPECT_NEAR(from_bf16(got[i]), want, std::abs(want) / 128 + 1e-6)
          << reduce_op_name(op) << " i " << i;
    }
  }
  std::vector<uint16_t> buf = mine;
  c->all_reduce(buf.data(), n, DType::bf16, ReduceOp::sum)->wait();
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(from_bf16(buf[i]), reduce_over_ranks<float>(p, i, ReduceOp::sum)) << i;
}

TEST(StagedCommunicator, Bf16RoundsTheF32SumToNearestEvenAndKeepsNaN) {
  auto c = host_staged();
  const int p = c->size();
  ASSERT_LE(p, 4);
  // 256 + (p - 1): bf16 spacing at 256 is 2, so 257 and 259 are ties. Nearest
  // even gives 256 and 260 (truncation would give 258 for p = 4, rounding
  // half up 258 for p = 2).
  const float want[] = {256, 256, 258, 260};
  std::vector<uint16_t> buf = {to_bf16(c->rank() == 0 ? 256.0f : 1.0f), to_bf16(1.0f)};
  if (c->rank() == 0) buf[1] = 0x7fc0;  // NaN from one rank makes the sum NaN
  c->all_reduce(buf.data(), 2, DType::bf16, ReduceOp::sum)->wait();
  EXPECT_EQ(from_bf16(buf[0]), want[p - 1]);
  EXPECT_TRUE(std::isnan(from_bf16(buf[1])));
}

TEST(StagedCommunicator, EveryCollectiveGoesThroughTheStager) {
  auto stager = std::make_shared<CountingStager>();
  StagedCommunicator c(MPI_COMM_WORLD, stager);
  const int p = c.size();
  std::vector<float> recv(p * 3), send(p * 3, 1.0f);
  c.wait_stream(nullptr);
  c.all_gather(send.data(), recv.data(), 3, DType::f32)->wait();
  EXPECT_EQ(stager->waits, 1u);
  EXPECT_EQ(stager->host_bytes, 12u);
  EXPECT_EQ(stager->device_bytes, size_t(12) * p);
  c.reduce_scatter(send.data(), recv.data(), 3, DType::f32, ReduceOp::sum)->wait();
  EXPECT_EQ(stager->host_bytes, 12u + 12u * p);
  EXPECT_EQ(stager->device_bytes, 12u * p + 12u);
  EXPECT_EQ(recv[0], float(p));
}

TEST(StagedCommunicator, RejectsWhatItCannotDo) {
  auto c = host_staged();
  int32_t x = 1;
  EXPECT_THROW(c->all_reduce(&x, 1, DType::i32, ReduceOp::avg), Error);
  EXPECT_THROW(c->broadcast(&x, 1, DType::i32, c->size()), Error);
}

TEST(StagedCommunicator, ProcessGroupsSplitFromIt) {
  int p = 1, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const int k = p % 2 == 0 ? 2 : p;
  ProcessGroups g = make_process_groups(host_staged(), k);
  ASSERT_NE(g.world, nullptr);
  EXPECT_STREQ(g.shard->backend_name(), "staged");
  EXPECT_EQ(g.shard->size(), k);
  EXPECT_EQ(g.replicate->size(), p / k);
  float v = float(me);
  g.shard->all_reduce(&v, 1, DType::f32, ReduceOp::sum)->wait();
  float want = 0;
  for (int r = me / k * k; r < me / k * k + k; ++r) want += float(r);
  EXPECT_EQ(v, want);
}

}  // namespace
}  // namespace fsdp
