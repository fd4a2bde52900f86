// Every MPI collective against a direct computation of what it must produce.
#include "comm/mpi_communicator.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "common/error.h"
#include "tests/comm/collective_checks.h"

namespace fsdp {
namespace {

using namespace fsdp::testing;

class MpiCollectives : public ::testing::TestWithParam<std::tuple<DType, size_t>> {};

TEST_P(MpiCollectives, MatchDirectComputation) {
  MpiCommunicator c(MPI_COMM_WORLD);
  auto [dtype, n] = GetParam();
  if (dtype == DType::f32)
    check_everything<float>(c, n);
  else
    check_everything<int32_t>(c, n);
}

INSTANTIATE_TEST_SUITE_P(Counts, MpiCollectives,
                         ::testing::Combine(::testing::Values(DType::f32, DType::i32),
                                            ::testing::Values(size_t(0), size_t(1), size_t(7),
                                                              size_t(1000003))),
                         dtype_count_name);

// Counts above the per-call limit go out as several MPI calls (for counts
// above INT_MAX); a tiny limit exercises that path on small buffers.
TEST(MpiCommunicator, SplitsMessagesAboveTheLimit) {
  MpiCommunicator c(MPI_COMM_WORLD, 3);
  for (size_t n : {size_t(2), size_t(3), size_t(7), size_t(13)}) {
    check_everything<float>(c, n);
    check_everything<int32_t>(c, n);
    check_reduce_scatter<float>(c, n, ReduceOp::avg);
  }
}

TEST(MpiCommunicator, Average) {
  MpiCommunicator c(MPI_COMM_WORLD);
  const int p = c.size();
  const size_t n = 1001;
  std::vector<float> buf = pattern<float>(c.rank(), n);
  c.all_reduce(buf.data(), n, DType::f32, ReduceOp::avg)->wait();
  std::vector<float> send = pattern<float>(c.rank(), p * n), recv(n);
  c.reduce_scatter(send.data(), recv.data(), n, DType::f32, ReduceOp::avg)->wait();
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float sum = 0, block_sum = 0;
    for (int r = 0; r < p; ++r) {
      sum += value<float>(r, i);
      block_sum += value<float>(r, c.rank() * n + i);
    }
    bad += std::abs(buf[i] - sum / p) > 1e-5f;
    bad += std::abs(recv[i] - block_sum / p) > 1e-5f;
  }
  EXPECT_EQ(bad, 0u);
}

TEST(MpiCommunicator, Barrier) {
  MpiCommunicator c(MPI_COMM_WORLD);
  WorkHandle w = c.barrier();
  w->wait();
  EXPECT_TRUE(w->test());
}

// What a prefetch does: post several collectives, compute, then wait for them
// in an order other than the posting order.
TEST(MpiCommunicator, OutstandingCollectivesWaitInAnyOrder) {
  MpiCommunicator c(MPI_COMM_WORLD);
  const int p = c.size(), me = c.rank();
  const size_t n = 100003;
  std::vector<float> g_send = pattern<float>(me, n), g_recv(p * n);
  std::vector<int32_t> ar = pattern<int32_t>(me, n);
  std::vector<float> rs_send = pattern<float>(me, p * n), rs_recv(n);
  std::vector<float> bc = me == 0 ? pattern<float>(0, n) : std::vector<float>(n, 0.0f);

  std::vector<WorkHandle> work;
  work.push_back(c.all_gather(g_send.data(), g_recv.data(), n, DType::f32));
  work.push_back(c.all_reduce(ar.data(), n, DType::i32, ReduceOp::sum));
  work.push_back(c.reduce_scatter(rs_send.data(), rs_recv.data(), n, DType::f32, ReduceOp::max));
  work.push_back(c.broadcast(bc.data(), n, DType::f32, 0));
  work.push_back(c.barrier());

  // Stand-in for a unit's compute, with the progress calls a training loop
  // makes between units.
  double acc = 0;
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < 100000; ++i) acc += 1.0 / (i + 1 + round);
    c.progress();
  }
  EXPECT_GT(acc, 0);

  for (auto it = work.rbegin(); it != work.rend(); ++it) (*it)->wait();
  for (auto& w : work) EXPECT_TRUE(w->test());

  std::vector<float> g_want;
  for (int r = 0; r < p; ++r) {
    auto b = pattern<float>(r, n);
    g_want.insert(g_want.end(), b.begin(), b.end());
  }
  expect_equal(g_recv, g_want, "all_gather");
  std::vector<int32_t> ar_want(n);
  std::vector<float> rs_want(n);
  for (size_t i = 0; i < n; ++i) {
    ar_want[i] = reduce_over_ranks<int32_t>(p, i, ReduceOp::sum);
    rs_want[i] = reduce_over_ranks<float>(p, me * n + i, ReduceOp::max);
  }
  expect_equal(ar, ar_want, "all_reduce");
  expect_equal(rs_recv, rs_want, "reduce_scatter");
  expect_equal(bc, pattern<float>(0, n), "broadcast");
}

TEST(MpiCommunicator, TestPollsToCompletion) {
  MpiCommunicator c(MPI_COMM_WORLD);
  const size_t n = 4099;
  std::vector<float> buf = pattern<float>(c.rank(), n);
  WorkHandle w = c.all_reduce(buf.data(), n, DType::f32, ReduceOp::sum);
  while (!w->test()) c.progress();
  std::vector<float> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reduce_over_ranks<float>(c.size(), i, ReduceOp::sum);
  expect_equal(buf, want, "all_reduce");
  w->wait();  // idempotent after completion
}

// A handle dropped without wait() still completes before its buffer goes.
TEST(MpiCommunicator, DroppedWorkCompletes) {
  MpiCommunicator c(MPI_COMM_WORLD);
  std::vector<int32_t> buf = pattern<int32_t>(c.rank(), 17);
  c.all_reduce(buf.data(), buf.size(), DType::i32, ReduceOp::max);
  std::vector<int32_t> want(17);
  for (size_t i = 0; i < 17; ++i) want[i] = reduce_over_ranks<int32_t>(c.size(), i, ReduceOp::max);
  expect_equal(buf, want, "all_reduce");
}

// Refused before any MPI call, so every rank throws and none is left waiting.
TEST(MpiCommunicator, RejectsWhatItCannotDo) {
  MpiCommunicator c(MPI_COMM_WORLD);
  std::vector<uint16_t> half(8);
  std::vector<int32_t> ints(8);
  EXPECT_THROW(c.all_reduce(half.data(), 4, DType::bf16, ReduceOp::sum), Error);
  EXPECT_THROW(c.all_gather(half.data(), half.data(), 1, DType::bf16), Error);
  EXPECT_THROW(c.all_reduce(ints.data(), 4, DType::i32, ReduceOp::avg), Error);
  EXPECT_THROW(c.broadcast(ints.data(), 4, DType::i32, c.size()), Error);
  EXPECT_THROW(c.broadcast(ints.data(), 4, DType::i32, -1), Error);
  try {
    c.all_reduce(half.data(), 4, DType::bf16, ReduceOp::sum);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16"), std::string::npos) << e.what();
  }
  // Still in step afterwards.
  check_all_reduce<int32_t>(c, 5, ReduceOp::sum);
}

TEST(MpiCommunicator, SplitMakesIndependentGroups) {
  MpiCommunicator c(MPI_COMM_WORLD);
  const int me = c.rank(), p = c.size();
  auto half = c.split(me % 2, me);
  EXPECT_EQ(half->size(), (p - me % 2 + 1) / 2);
  EXPECT_EQ(half->rank(), me / 2);
  EXPECT_STREQ(half->backend_name(), "mpi");
  int32_t sum = me;
  half->all_reduce(&sum, 1, DType::i32, ReduceOp::sum)->wait();
  int32_t want = 0;
  for (int r = me % 2; r < p; r += 2) want += r;
  EXPECT_EQ(sum, want);
}

}  // namespace
}  // namespace fsdp
