// The optimizer step in two halves (measure_gradients, then apply_update or
// discard_gradients): the split changes no number, and a non-finite gradient
// is seen, traced to its unit and kept away from the weights on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "comm/process_groups.h"
#include "common/error.h"
#include "tests/shard/engine_harness.h"

namespace fsdp {
namespace {

using testing::EngineRun;

constexpr int kB = 2, kT = 12, kAccum = 2;

struct World {
  std::unique_ptr<Communicator> comm = make_communicator(Backend::mpi, MPI_COMM_WORLD);
  int rank() const { return comm->rank(); }
  int size() const { return comm->size(); }
};

std::unique_ptr<EngineRun> make_run(World& w) {
  return std::make_unique<EngineRun>(testing::engine_test_config(), *w.comm, nullptr, w.rank(),
                                     w.size(), kB, kT, kAccum);
}

std::vector<float> copy_of(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel);
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(EngineUpdate, SplitStepIsBitwiseTheOneCallStep) {
  World w;
  auto whole = make_run(w), split = make_run(w);
  for (int s = 0; s < 4; ++s) {
    whole->step(s, *w.comm);
    split->forward_backward(s, *w.comm);
    const GradientNorms n = split->engine.measure_gradients();
    ASSERT_TRUE(n.finite());
    ASSERT_EQ(n.unit.size(), size_t(split->engine.num_units()));
    double sum = 0;
    for (double u : n.unit) sum += u * u;
    EXPECT_NEAR(std::sqrt(sum), n.total, 1e-6 * n.total);
    split->engine.apply_update(EngineRun::adam(), 1e-3f, n);
  }
  EXPECT_EQ(whole->losses, split->losses);
  for (int u = 0; u < whole->engine.num_units(); ++u) {
    EXPECT_TRUE(bitwise_equal(copy_of(whole->engine.master(u)), copy_of(split->engine.master(u))))
        << "unit " << u;
    EXPECT_TRUE(
        bitwise_equal(copy_of(whole->engine.exp_avg(u)), copy_of(split->engine.exp_avg(u))));
  }
  EXPECT_EQ(whole->engine.optimizer_steps(), split->engine.optimizer_steps());
}

// One rank's gradient goes NaN in one unit: every rank sees a non-finite
// norm naming that unit, the update is refused, and discarding the step
// leaves weights, moments and the step count exactly as they were.
TEST(EngineUpdate, NonFiniteGradientIsNamedAndNeverApplied) {
  World w;
  auto run = make_run(w);
  run->step(0, *w.comm);
  const int unit = 1;  // a transformer block: not the embedding
  std::vector<std::vector<float>> master, moment;
  for (int u = 0; u < run->engine.num_units(); ++u) {
    master.push_back(copy_of(run->engine.master(u)));
    moment.push_back(copy_of(run->engine.exp_avg_sq(u)));
  }
  run->forward_backward(1, *w.comm);
  if (w.rank() == w.size() - 1)
    run->engine.grad_shard(unit).f32()[0] = std::numeric_limits<float>::quiet_NaN();

  const GradientNorms n = run->engine.measure_gradients();
  EXPECT_FALSE(n.finite());
  const std::vector<std::string> bad = n.nonfinite_units(run->model);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0], run->model.units()[unit].name);
  EXPECT_THROW(run->engine.apply_update(EngineRun::adam(), 1e-3f, n), Error);
  EXPECT_THROW(run->engine.step(EngineRun::adam(), 1e-3f), Error);

  run->engine.discard_gradients();
  EXPECT_EQ(run->engine.optimizer_steps(), 1);
  for (int u = 0; u < run->engine.num_units(); ++u) {
    EXPECT_TRUE(bitwise_equal(master[u], copy_of(run->engine.master(u)))) << "unit " << u;
    EXPECT_TRUE(bitwise_equal(moment[u], copy_of(run->engine.exp_avg_sq(u)))) << "unit " << u;
  }
  // The next step trains from clean gradients.
  run->forward_backward(2, *w.comm);
  EXPECT_TRUE(run->engine.measure_gradients().finite());
}

TEST(EngineUpdate, MastersFiniteSeesOneRanksInf) {
  World w;
  auto run = make_run(w);
  EXPECT_TRUE(run->engine.masters_finite());
  float* p = run->engine.master(2).f32();
  const float kept = p[0];
  if (w.rank() == 0) p[0] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(run->engine.masters_finite());  // on every rank, not only rank 0
  p[0] = kept;
  EXPECT_TRUE(run->engine.masters_finite());
}

// GradientNorms::local (the rerun check's fingerprint, src/trainer/trainer_rerun.cpp)
// is what this rank computed itself, before any reduction: each unit's sum of
// squares equals that of a lone rank fed the same micro-batch. Sharded (one
// micro-batch: one term) and data parallel in place (shard groups of one,
// two micro-batches accumulated before the all-reduce across replicas).
void expect_local_sums_are_own(int shard_group, int accum) {
  ProcessGroups g = make_process_groups(Backend::mpi, shard_group);
  const int world = g.world->size(), rank = g.world->rank();
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), rank, world, kB, kT,
                accum);
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  EngineRun alone(testing::engine_test_config(), *self, nullptr, rank, world, kB, kT, accum);
  // No update (the two would then train apart); the second step comes after
  // a discarded one, as a rerun does.
  for (int s = 0; s < 2; ++s) {
    run.forward_backward(s, *g.world);
    alone.forward_backward(s, *self);
    const GradientNorms n = run.engine.measure_gradients(), own = alone.engine.measure_gradients();
    ASSERT_EQ(n.local.size(), size_t(run.engine.num_units()));
    for (size_t u = 0; u < n.local.size(); ++u)
      EXPECT_NEAR(n.local[u], own.unit[u] * own.unit[u], 1e-5 * own.unit[u] * own.unit[u])
          << "step " << s << " unit " << u << " rank " << rank;
    run.engine.discard_gradients();
    alone.engine.discard_gradients();
  }
}

TEST(EngineUpdate, LocalSumsAreThisRanksOwnGradientSharded) {
  expect_local_sums_are_own(0, 1);
}

TEST(EngineUpdate, LocalSumsAreThisRanksOwnGradientDataParallel) {
  expect_local_sums_are_own(1, 2);
}

}  // namespace
}  // namespace fsdp
