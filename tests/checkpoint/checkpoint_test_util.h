// Shared pieces of the checkpoint suites: a fresh directory per test (rank 0
// creates and removes it, every rank learns its name), full-state gathers for
// comparing runs sharded differently, and a metadata example.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "tests/shard/engine_harness.h"

namespace fsdp::testing {

inline int world_rank(MPI_Comm c = MPI_COMM_WORLD) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
inline int world_size(MPI_Comm c = MPI_COMM_WORLD) {
  int n = 0;
  MPI_Comm_size(c, &n);
  return n;
}

inline void bcast_string(std::string& s, MPI_Comm c = MPI_COMM_WORLD) {
  int n = int(s.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, c);
  s.resize(size_t(n));
  MPI_Bcast(s.data(), n, MPI_CHAR, 0, c);
}

// True on every rank iff `ok` is true on every rank, so ASSERTs that follow
// cannot leave some ranks waiting in a collective.
inline bool all_ranks(bool ok, MPI_Comm c = MPI_COMM_WORLD) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, c);
  return v == 1;
}

// A directory of its own for the running test, removed at the end. The CTest
// entries for 1-4 ranks may run at once, so the name has rank 0's pid.
class TestDir {
 public:
  TestDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    if (world_rank() == 0) {
      path_ = (std::filesystem::path(::testing::TempDir()) /
               ("fsdp_ckpt_" + std::string(info->test_suite_name()) + "." + info->name() + "." +
                std::to_string(::getpid())))
                  .string();
      std::filesystem::remove_all(path_);
      std::filesystem::create_directories(path_);
    }
    bcast_string(path_);
  }
  ~TestDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::filesystem::remove_all(path_);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Every unit's full (unpadded) masters and moments, gathered over the shard group.
struct FullState {
  std::vector<std::vector<float>> master, exp_avg, exp_avg_sq;
  bool operator==(const FullState&) const = default;
};

// In the unit's spec order (UnitSpec::offset_of), whatever the engine's
// layout (an FP8 run's is in segments), so differently laid-out runs compare.
inline std::vector<float> gather(const FsdpEngine& e, int u, Tensor t, Communicator& shard,
                                 const UnitSpec& spec) {
  const UnitLayout& l = e.layout(u);
  std::vector<float> flat(size_t(l.padded));
  for (const Segment& g : l.segments)
    shard.all_gather(t.f32() + g.local, flat.data() + g.begin, size_t(g.shard), DType::f32)->wait();
  std::vector<float> out(size_t(spec.numel()), 0.0f);
  for (int p = 0; p < int(l.offsets.size()); ++p)
    std::copy_n(flat.begin() + l.offsets[p], l.stored[p], out.begin() + spec.offset_of(p));
  return out;
}

inline FullState full_state(const FsdpEngine& e, Communicator& shard) {
  FullState s;
  for (int u = 0; u < e.num_units(); ++u) {
    const UnitSpec& spec = e.model().units()[size_t(u)];
    s.master.push_back(gather(e, u, e.master(u), shard, spec));
    s.exp_avg.push_back(gather(e, u, e.exp_avg(u), shard, spec));
    s.exp_avg_sq.push_back(gather(e, u, e.exp_avg_sq(u), shard, spec));
  }
  return s;
}

// Makes root's state everyone's, for ranks that did not take part in a run.
inline void bcast_state(FullState& s, int units, const ModelConfig& c, MPI_Comm comm) {
  const auto specs = model_units(c);
  for (auto* part : {&s.master, &s.exp_avg, &s.exp_avg_sq}) {
    part->resize(size_t(units));
    for (int u = 0; u < units; ++u) {
      (*part)[size_t(u)].resize(size_t(specs[size_t(u)].numel()));
      MPI_Bcast((*part)[size_t(u)].data(), int((*part)[size_t(u)].size()), MPI_FLOAT, 0, comm);
    }
  }
}

inline CheckpointMeta example_meta(int64_t step) {
  CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 1000 + 7;
  m.seed = 0xfedcba9876543210ull;
  m.config_text = "model = tiny\nlr = 0.001\n# comment\n";
  m.sampler = {{"seed", -5}, {"step", step}, {"consumed", step * 8}};
  return m;
}

constexpr int kB = 2, kT = 8, kAccum = 1;

// A run over `shard` on `comm`'s ranks; replicate groups as given.
inline std::unique_ptr<EngineRun> make_run(Communicator& shard, Communicator* replicate,
                                           Communicator& dp, uint64_t seed = 0,
                                           ModelConfig cfg = engine_test_config(),
                                           bool fp8 = false) {
  EngineOptions eo;
  eo.seed = seed;
  return std::make_unique<EngineRun>(cfg, shard, replicate, dp.rank(), dp.size(), kB, kT, kAccum,
                                     eo, fp8);
}

}  // namespace fsdp::testing
