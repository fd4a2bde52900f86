#include "comm/runtime.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"

namespace fsdp {
namespace {

TEST(WorldInfo, OneMachineIsOneNode) {
  WorldInfo w = world_info();
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(w.rank, rank);
  EXPECT_EQ(w.size, size);
  EXPECT_EQ(w.local_rank, rank);
  EXPECT_EQ(w.local_size, size);
  EXPECT_EQ(w.node, 0);
  EXPECT_EQ(w.num_nodes, 1);
}

TEST(MpiRuntime, LeavesAnExistingMpiAlone) {
  int argc = 0;
  char** argv = nullptr;
  {
    MpiRuntime runtime(&argc, &argv);
    EXPECT_FALSE(runtime.owns_mpi());
    EXPECT_GE(runtime.thread_level(), MPI_THREAD_SERIALIZED);
  }
  int finalised = 1;
  MPI_Finalized(&finalised);
  EXPECT_EQ(finalised, 0);
  // MPI still works after the runtime went away.
  int one = 1, sum = 0;
  EXPECT_EQ(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), MPI_SUCCESS);
  EXPECT_EQ(sum, world_info().size);
}

// Sets an environment variable for one scope and restores it afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_, old_->c_str(), 1);
    else
      unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(CheckLaunch, OutsideSlurmAcceptsAnything) {
  ScopedEnv env("SLURM_NTASKS", nullptr);
  EXPECT_NO_THROW(check_launch(world_info()));
}

TEST(CheckLaunch, AcceptsTheExpectedSize) {
  WorldInfo w = world_info();
  ScopedEnv env("SLURM_NTASKS", std::to_string(w.size).c_str());
  EXPECT_NO_THROW(check_launch(w));
}

TEST(CheckLaunch, NamesTheMismatch) {
  WorldInfo w = world_info();
  ScopedEnv env("SLURM_NTASKS", std::to_string(w.size + 4).c_str());
  try {
    check_launch(w);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("launched " + std::to_string(w.size) + " rank"), std::string::npos) << what;
    EXPECT_NE(what.find("SLURM_NTASKS=" + std::to_string(w.size + 4)), std::string::npos) << what;
    EXPECT_NE(what.find("pmix"), std::string::npos) << what;
  }
}

TEST(CheckLaunch, RejectsGarbage) {
  ScopedEnv env("SLURM_NTASKS", "4x");
  EXPECT_THROW(check_launch(world_info()), Error);
}

}  // namespace
}  // namespace fsdp
