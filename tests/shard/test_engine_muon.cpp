// Muon under ZeRO-3 (shard/muon.h): each block matrix is orthogonalised whole
// by its owner rank, so N ranks, hybrid sharding, data parallelism and FP8
// train as one rank holding everything does, to the rounding of a different
// gradient summation order (the same 1e-5 bar as AdamW's equivalence).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "comm/process_groups.h"
#include "shard/memory_plan.h"
#include "shard/muon.h"
#include "tests/shard/engine_harness.h"

namespace fsdp {
namespace {

using testing::EngineRun;
using testing::rel_diff;

constexpr int kSteps = 20, kB = 2, kT = 12, kAccum = 2;
constexpr double kTol = 1e-5;
// Muon's orthogonalised step is smaller than Adam's first steps: at 1e-3
// this model does not move in 20 steps; at 1e-2 its loss falls by ~0.3.
constexpr float kLr = 1e-2f;

OptimizerConfig muon() {
  OptimizerConfig o = EngineRun::adam();
  o.kind = OptimizerKind::muon;
  return o;
}

int world_size() {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  return world;
}

// One rank holding everything, the same global batch, Muon.
std::unique_ptr<EngineRun> reference(Communicator& self, int world, bool fp8 = false,
                                     OptimizerConfig opt = muon()) {
  auto run = std::make_unique<EngineRun>(testing::engine_test_config(), self, nullptr, 0, 1, kB, kT,
                                         kAccum * world, EngineOptions{}, fp8);
  run->optimizer = opt;
  for (int s = 0; s < kSteps; ++s) run->step(s, self, kLr);
  return run;
}

void expect_matches(EngineRun& run, Communicator& shard, EngineRun& ref, Communicator& self,
                    const char* what) {
  double worst_loss = 0, worst_param = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double d = std::abs(run.losses[s] - ref.losses[s]) / ref.losses[s];
    worst_loss = std::max(worst_loss, d);
    EXPECT_LE(d, kTol) << what << ": step " << s;
  }
  for (int u = 0; u < run.engine.num_units(); ++u) {
    const double d = rel_diff(run.full_master(u, shard), ref.full_master(u, self));
    worst_param = std::max(worst_param, d);
    EXPECT_LE(d, kTol) << what << ": unit " << u;
  }
  EXPECT_LT(ref.losses.back(), ref.losses.front() - 0.05) << "Muon did not train";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    std::printf(
        "[ measured ] Muon, %s on %d ranks (shard group %d): worst loss rel. error "
        "%.2e, worst parameter rel. error %.2e\n",
        what, world_size(), shard.size(), worst_loss, worst_param);
}

TEST(MuonEquivalence, ShardedEqualsOneRank) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto ref = reference(*self, world_size());
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), g.world->rank(),
                g.world->size(), kB, kT, kAccum);
  run.optimizer = muon();
  for (int s = 0; s < kSteps; ++s) run.step(s, *g.world, kLr);
  expect_matches(run, *g.shard, *ref, *self, "FSDP");
}

TEST(MuonEquivalence, HybridShardingEqualsOneRank) {
  const int world = world_size();
  if (world % 2 != 0) GTEST_SKIP() << "hybrid sharding needs an even world size";
  ProcessGroups g = make_process_groups(Backend::mpi, 2);
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto ref = reference(*self, world);
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), g.world->rank(), world,
                kB, kT, kAccum);
  run.optimizer = muon();
  for (int s = 0; s < kSteps; ++s) run.step(s, *g.world, kLr);
  expect_matches(run, *g.shard, *ref, *self, "hybrid (shard groups of 2)");
}

TEST(MuonEquivalence, DataParallelInPlaceEqualsOneRank) {
  const int world = world_size();
  if (world < 2) GTEST_SKIP() << "data parallelism needs 2+ ranks";
  ProcessGroups g = make_process_groups(Backend::mpi, 1);
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto ref = reference(*self, world);
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), g.world->rank(), world,
                kB, kT, kAccum);
  ASSERT_TRUE(run.engine.direct());
  run.optimizer = muon();
  for (int s = 0; s < kSteps; ++s) run.step(s, *g.world, kLr);
  expect_matches(run, *g.shard, *ref, *self, "data parallel (shard groups of 1, in place)");
}

// NorMuon: sharded as on one rank, not Muon's run, and its moments where
// shard/muon.h keeps them (each Muon matrix's first `rows` elements of
// optim/exp_avg_sq, the rest zero).
TEST(MuonEquivalence, NorMuonShardedEqualsOneRank) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  OptimizerConfig opt = muon();
  opt.muon.normuon = true;
  auto ref = reference(*self, world_size(), false, opt);
  EngineRun run(testing::engine_test_config(), *g.shard, g.replicate.get(), g.world->rank(),
                g.world->size(), kB, kT, kAccum);
  run.optimizer = opt;
  for (int s = 0; s < kSteps; ++s) run.step(s, *g.world, kLr);
  expect_matches(run, *g.shard, *ref, *self, "NorMuon, FSDP");

  auto plain = reference(*self, world_size());
  EXPECT_GT(std::abs(plain->losses.back() - ref->losses.back()), 1e-4) << "NorMuon did nothing";
  const auto& units = ref->model.units();
  const Tensor v = ref->engine.exp_avg_sq(1);
  const UnitLayout& l = ref->engine.layout(1);
  for (int p = 0; p < int(units[1].params.size()); ++p) {
    const ParamSpec& s = units[1].params[size_t(p)];
    if (!takes_muon(s)) continue;
    const Overlap o = shard_overlap(l, p, 0);
    for (int64_t e = 0; e < o.count; ++e)
      ASSERT_EQ(v.f32()[o.local + e] > 0, e < s.shape[0]) << s.name << " element " << e;
  }
}

// Under FP8 the codes each rank gathers are cast from Muon's updated masters:
// bit for bit the run in which the model casts the gathered weight itself.
// (Against one rank, FP8 is not compared: a rounding difference that moves
// a value across a code boundary is a whole code step.)
TEST(MuonEquivalence, Fp8GatherTrainsAsCastingTheGatheredWeight) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const ModelConfig c = testing::engine_test_config();
  const int rank = g.world->rank(), world = g.world->size();
  EngineOptions cast_eo;
  cast_eo.fp8_gather = false;
  EngineRun cast(c, *g.shard, nullptr, rank, world, kB, kT, kAccum, cast_eo, true);
  EngineRun gathered(c, *g.shard, nullptr, rank, world, kB, kT, kAccum, {}, true);
  ASSERT_TRUE(gathered.engine.fp8_gather());
  // No clipping: the segmented layout sums the norm in another order.
  OptimizerConfig opt = muon();
  opt.adamw.grad_clip = 0;
  cast.optimizer = gathered.optimizer = opt;
  for (int s = 0; s < kSteps; ++s) {
    cast.step(s, *g.world, kLr);
    gathered.step(s, *g.world, kLr);
  }
  EXPECT_EQ(gathered.losses, cast.losses);
  EXPECT_LT(gathered.losses.back(), gathered.losses.front() - 0.05);
}

// Muon really runs: its block matrices leave AdamW's path, and the rest of
// the unit still takes AdamW.
TEST(MuonEquivalence, OnlyTheBlockMatricesLeaveAdamW) {
  auto self = make_communicator(Backend::mpi, MPI_COMM_SELF);
  auto m = reference(*self, 1);
  auto a = reference(*self, 1, false, EngineRun::adam());
  const auto& units = m->model.units();
  for (int u = 0; u < int(units.size()); ++u) {
    const UnitLayout& l = m->engine.layout(u);
    const auto wm = m->full_master(u, *self), wa = a->full_master(u, *self);
    for (int p = 0; p < int(units[u].params.size()); ++p) {
      const ParamSpec& s = units[u].params[p];
      const std::vector<float> pm(wm.begin() + l.offsets[p], wm.begin() + l.offsets[p] + s.numel());
      const std::vector<float> pa(wa.begin() + l.offsets[p], wa.begin() + l.offsets[p] + s.numel());
      if (takes_muon(s)) {
        EXPECT_GT(rel_diff(pm, pa), 1e-3) << s.name << " followed AdamW under Muon";
      }
    }
  }
  // AdamW's second moment stays zero for Muon's matrices (Muon keeps none),
  // and the norm gains of the same unit got AdamW's.
  const Tensor v = m->engine.exp_avg_sq(1);
  const UnitLayout& l = m->engine.layout(1);
  for (int p = 0; p < int(units[1].params.size()); ++p) {
    const Overlap o = shard_overlap(l, p, 0);
    bool any = false;
    for (int64_t i = o.local; i < o.local + o.count; ++i) any = any || v.f32()[i] != 0.0f;
    EXPECT_EQ(any, !takes_muon(units[1].params[p])) << units[1].params[p].name;
  }
}

// The exchange itself, on a unit whose first matrix spans three ranks
// (and the second some, unevenly): each rank's slice of the update is bit
// for bit what one rank computes on the whole matrix, since the owner runs
// the same ops on the same values and the others add only zeros. Under
// NorMuon the rows' statistics and moments (in optim/exp_avg_sq, started
// from non-zero values) cross ranks as well, and match too.
void split_matrix_is_updated_as_on_one_rank(bool normuon) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const int rank = g.shard->rank(), ranks = g.shard->size();
  auto matrix = [](const char* name, int64_t r, int64_t c) {
    ParamSpec p{name, {r, c}, Init::normal, 0.02f};
    p.fp8 = true;  // a block linear: Muon's
    return p;
  };
  const UnitSpec unit{"u",
                      {ParamSpec{"g0", {5}, Init::ones, 0}, matrix("a", 37, 23),
                       ParamSpec{"g1", {7}, Init::ones, 0}, matrix("b", 11, 29)}};
  const UnitLayout l = make_layout(unit, ranks);
  if (ranks >= 3) {
    int holders = 0;
    for (int r = 0; r < ranks; ++r) holders += shard_overlap(l, 1, r).count > 0;
    ASSERT_GE(holders, 3) << "matrix a should span three ranks";
  }
  // Deterministic values by position in the gathered unit.
  auto value = [](int64_t i, int salt) { return float(std::sin(0.37 * double(i) + salt)) * 0.5f; };
  CpuOps ops;
  MuonConfig c;
  c.ns_coefficients = MuonNsCoefficients::polar_express;  // the step passes its table on
  c.normuon = normuon;
  MuonStep step(ops, *g.shard, {unit}, {l}, c);
  Tensor master = ops.alloc(DType::f32, l.shard), grad = ops.alloc(DType::f32, l.shard),
         mom = ops.alloc(DType::f32, l.shard), sq = ops.alloc(DType::f32, l.shard);
  ops.zero(master), ops.zero(grad), ops.zero(mom), ops.zero(sq);
  // NorMuon's moment of row r: element r of the matrix's optim/exp_avg_sq.
  auto moment = [&](int64_t i, int p) {
    const int64_t e = i - l.offsets[size_t(p)];
    return e < unit.params[size_t(p)].shape[0] ? 1e-3f * (1.5f + value(i, 4)) : 0.0f;
  };
  for (int p : {1, 3}) {
    const Overlap o = shard_overlap(l, p, rank);
    for (int64_t k = 0; k < o.count; ++k) {
      master.f32()[o.local + k] = value(o.begin + k, 1);
      grad.f32()[o.local + k] = value(o.begin + k, 2);
      mom.f32()[o.local + k] = value(o.begin + k, 3);
      sq.f32()[o.local + k] = moment(o.begin + k, p);
    }
  }
  const float lr = 0.02f, wd = 0.1f, scale = 0.75f;
  step.update_unit(0, l, master, grad, mom, sq, lr, wd, scale);

  for (int p : {1, 3}) {
    const ParamSpec& s = unit.params[size_t(p)];
    const int64_t rows = s.shape[0], cols = s.shape[1], n = rows * cols, at = l.offsets[size_t(p)];
    // One rank's whole matrix, through the same ops.
    Tensor w = ops.alloc(DType::f32, n), gr = ops.alloc(DType::f32, n),
           m = ops.alloc(DType::f32, n), u = ops.alloc(DType::f32, n);
    for (int64_t k = 0; k < n; ++k) {
      w.f32()[k] = value(at + k, 1), gr.f32()[k] = value(at + k, 2), m.f32()[k] = value(at + k, 3);
    }
    const std::vector<MuonSpan> all{{0, n, muon_lr_scale(c.lr_adjust, rows, cols)}};
    ops.muon_momentum(gr, m, all, c.momentum, c.nesterov, scale);
    ops.newton_schulz(u, gr, rows, cols, muon_newton_schulz(c.ns_steps, c.ns_coefficients));
    Tensor stats = ops.alloc(DType::f32, 2 * rows);
    if (normuon) {
      ops.row_mean_squares(stats, u, rows, cols);
      for (int64_t r = 0; r < rows; ++r) stats.f32()[rows + r] = moment(at + r, p);
      ops.normuon_scale(u, 0, n, stats, rows, cols, c.normuon_beta2, kNorMuonEps);
    }
    ops.muon_update(w, u, all, lr, wd);
    const Overlap o = shard_overlap(l, p, rank);
    for (int64_t k = 0; k < o.count; ++k) {
      const int64_t e = o.begin - at + k;  // the element of the matrix
      ASSERT_EQ(master.f32()[o.local + k], w.f32()[e]) << s.name << " element " << k;
      ASSERT_EQ(mom.f32()[o.local + k], m.f32()[e]) << s.name << " momentum " << k;
      const float want_sq = !normuon   ? moment(o.begin + k, p)
                            : e < rows ? stats.f32()[rows + e]
                                       : 0;
      ASSERT_EQ(sq.f32()[o.local + k], want_sq) << s.name << " second moment " << k;
    }
    if (normuon) {  // the moments moved: a test that cannot pass by leaving them
      EXPECT_NE(stats.f32()[rows], moment(at, p)) << s.name;
      EXPECT_NE(stats.f32()[0], 1.0f) << s.name;  // nor by factors of 1
    }
    for (Tensor t : {w, gr, m, u, stats}) ops.free(t);
  }
  // The gains are AdamW's: Muon left them alone.
  for (int p : {0, 2}) {
    const Overlap o = shard_overlap(l, p, rank);
    for (int64_t k = 0; k < o.count; ++k) ASSERT_EQ(master.f32()[o.local + k], 0.0f);
  }
  for (Tensor t : {master, grad, mom, sq}) ops.free(t);
}

TEST(MuonStep, AMatrixSplitOverThreeRanksIsUpdatedAsOnOneRank) {
  split_matrix_is_updated_as_on_one_rank(false);
}

TEST(MuonStep, NorMuonOnAMatrixSplitOverThreeRanksIsAsOnOneRank) {
  split_matrix_is_updated_as_on_one_rank(true);
}

// A rank orthogonalises the matrices it owns in one Newton-Schulz call per
// shape, so a backend can batch their GEMMs (the CUDA one does): seen
// through the ops' hook, each shape once, batches adding up to its matrices.
TEST(MuonStep, OneNewtonSchulzCallPerShape) {
  struct Calls : OpHook {
    std::vector<std::string> keys;
    void begin(const OpCall& c) override {
      if (c.key.rfind("newton_schulz ", 0) == 0) keys.push_back(c.key);
    }
    void end(const OpCall&) override {}
  };
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const int rank = g.shard->rank();
  auto matrix = [](const char* name, int64_t r, int64_t c) {
    ParamSpec p{name, {r, c}, Init::normal, 0.02f};
    p.fp8 = true;
    return p;
  };
  const UnitSpec unit{"u",
                      {matrix("a", 12, 20), ParamSpec{"g", {7}, Init::ones, 0}, matrix("b", 8, 20),
                       matrix("c", 12, 20), matrix("d", 20, 12), matrix("e", 12, 20)}};
  const UnitLayout l = make_layout(unit, g.shard->size());
  CpuOps ops;
  MuonStep step(ops, *g.shard, {unit}, {l}, MuonConfig{});
  Tensor master = ops.alloc(DType::f32, l.shard), grad = ops.alloc(DType::f32, l.shard),
         mom = ops.alloc(DType::f32, l.shard);
  for (Tensor t : {master, grad, mom}) ops.zero(t);
  for (int64_t k = 0; k < l.shard; ++k) grad.f32()[k] = float(std::sin(0.3 * double(k + rank)));
  Calls calls;
  ops.set_hook(&calls);
  step.update_unit(0, l, master, grad, mom, Tensor{}, 0.02f, 0.1f, 1.0f);
  ops.set_hook(nullptr);
  std::map<std::string, int> want;  // "RxC" -> this rank's matrices of that shape
  for (const MuonMatrix& m : plan_muon({unit}, g.shard->size(), MuonConfig{}))
    if (m.owner == rank) ++want[std::to_string(m.rows) + "x" + std::to_string(m.cols)];
  std::map<std::string, int> got;
  for (const std::string& k : calls.keys) {
    const std::string dims = k.substr(k.find(' ') + 1);  // "BxRxC"
    const size_t x = dims.find('x');
    EXPECT_TRUE(got.emplace(dims.substr(x + 1), std::stoi(dims.substr(0, x))).second)
        << "a second call for " << dims.substr(x + 1);
  }
  EXPECT_EQ(got, want);
  for (Tensor t : {master, grad, mom}) ops.free(t);
}

// The memory plan counts Muon's two buffers as the engine allocates them
// (at its first Muon step), on one rank (one buffer) and on several (two),
// each the size of a block: with a 4096-token vocabulary the embedding is
// the largest unit, but it holds no Muon matrix and is never exchanged, so
// the buffers stay as they are with the tiny preset's 256.
TEST(MuonStep, BuffersAreThePlans) {
  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  ModelConfig big_vocab = model_preset("tiny");
  big_vocab.vocab_size = 4096;
  const int shard = g.shard->size();
  const auto big_units = model_units(big_vocab);
  ASSERT_GT(make_layout(big_units.front(), shard, false).padded,
            make_layout(big_units[1], shard, false).padded);
  for (bool fp8 : {false, true}) {
    int64_t tiny_buffers = -1;
    for (const ModelConfig& cfg : {model_preset("tiny"), big_vocab}) {
      EngineRun run(cfg, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1, {}, fp8);
      run.optimizer = muon();
      const PlanSettings ps{.shard_size = shard, .batch = 2, .seq_len = 16, .fp8 = fp8};
      EXPECT_EQ(run.engine.buffer_bytes(), plan_memory(cfg, ps).buffers()) << "before, " << fp8;
      run.step(0, *g.world, kLr);
      PlanSettings with = ps;
      with.optimizer = OptimizerKind::muon;
      const MemoryPlan p = plan_memory(cfg, with);
      EXPECT_GT(p.optimizer_buffers, 0);
      EXPECT_EQ(run.engine.buffer_bytes(), p.buffers()) << "after, " << fp8;
      if (tiny_buffers < 0) tiny_buffers = p.optimizer_buffers;
      EXPECT_EQ(p.optimizer_buffers, tiny_buffers) << "vocabulary " << cfg.vocab_size;
    }
  }
  // NorMuon adds its row statistics: two floats per row of a block's
  // matrices (tiny: 2 x (64 + 32 + 32 + 64 + 192 + 192 + 64) = 1280).
  const ModelConfig tiny = model_preset("tiny");
  EngineRun run(tiny, *g.shard, nullptr, g.world->rank(), g.world->size(), 2, 16, 1, {}, false);
  run.optimizer = muon();
  run.optimizer.muon.normuon = true;
  run.step(0, *g.world, kLr);
  const PlanSettings plain{
      .shard_size = shard, .batch = 2, .seq_len = 16, .optimizer = OptimizerKind::muon};
  PlanSettings with = plain;
  with.normuon = true;
  EXPECT_EQ(run.engine.buffer_bytes(), plan_memory(tiny, with).buffers());
  EXPECT_EQ(plan_memory(tiny, with).optimizer_buffers - plan_memory(tiny, plain).optimizer_buffers,
            4 * 1280);
}

// Owners: every matrix has one, the heaviest spread first, the same on every rank.
TEST(MuonStep, OwnersSpreadTheNewtonSchulzWork) {
  const auto units = model_units(testing::engine_test_config());
  const auto plan = plan_muon(units, 3, MuonConfig{});
  ASSERT_EQ(plan.size(), size_t(3 * 7));  // 3 blocks of Wq Wk Wv Wo W1 W3 W2
  std::set<int> owners;
  for (const MuonMatrix& m : plan) owners.insert(m.owner);
  EXPECT_EQ(owners, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(plan_muon(units, 1, MuonConfig{})[5].owner, 0);
  // The scales: 0.2 sqrt(max) (match_rms_adamw), sqrt(max(1, rows/cols)) (original).
  EXPECT_FLOAT_EQ(muon_lr_scale(MuonLrAdjust::match_rms_adamw, 1024, 4096), 0.2f * 64);
  EXPECT_FLOAT_EQ(muon_lr_scale(MuonLrAdjust::original, 4096, 1024), 2.0f);
  EXPECT_FLOAT_EQ(muon_lr_scale(MuonLrAdjust::original, 1024, 4096), 1.0f);
}

// muon_cost by hand on the tiny preset (2 blocks; per block Wq, Wo 64x64,
// Wk, Wv 32x64, W1, W3 192x64, W2 64x192). One Newton-Schulz step costs
// 4 m^2 n + 2 m^3 on the wide orientation: 1572864, 327680 and 3670016.
// On 4 ranks plan_muon gives the six MLP matrices to ranks 0 1 2 3 0 1,
// then Wq, Wo of block 1 and 2 to ranks 2 3 2 3, then Wk, Wv to 2 3 2 3:
// block 1's busiest rank is 2 (W2 + Wq + Wk), block 2's rank 3 (W1 + Wo + Wv),
// both 5570560 FLOPs a step.
TEST(MuonCost, ByHandOnTheTinyPreset) {
  const auto units = model_units(model_preset("tiny"));
  const double per_block = 2 * 1572864.0 + 2 * 327680.0 + 3 * 3670016.0;
  for (int steps : {5, 1, 0}) {
    MuonConfig c;
    c.ns_steps = steps;
    const MuonCost one = muon_cost(units, 1, c), four = muon_cost(units, 4, c);
    EXPECT_EQ(one.matrices, 14);
    EXPECT_EQ(four.matrices, 14);
    EXPECT_EQ(one.exchanged_units, 2) << "the blocks, also with " << steps << " steps";
    EXPECT_EQ(four.exchanged_units, 2);
    EXPECT_EQ(one.total_flops, steps * 2 * per_block);
    EXPECT_EQ(one.critical_flops, one.total_flops) << "one rank does it all";
    EXPECT_EQ(four.total_flops, one.total_flops);
    EXPECT_EQ(four.critical_flops, steps * 2 * 5570560.0);
    // every matrix on one rank (2 x (2 x 4096 + 2 x 2048 + 3 x 12288)); on
    // four, W2 + Wq + Wk and W1 + Wo + Wv (12288 + 4096 + 2048 each)
    EXPECT_EQ(one.critical_elems, 98304);
    EXPECT_EQ(four.critical_elems, 2 * 18432);
  }
}

}  // namespace
}  // namespace fsdp
