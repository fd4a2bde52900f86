#include "comm/launch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.h"

namespace fsdp {
namespace {

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

WorldInfo world_of(int size) {
  WorldInfo w;
  w.size = size;
  return w;
}

std::string launch_error(const WorldInfo& w, const LaunchEnv& e) {
  try {
    check_launch(w, e);
  } catch (const Error& err) {
    return err.what();
  }
  return "";
}

TEST(ReadLaunchEnv, MpirunWinsOverTheOrtedStep) {
  // A rank that mpirun starts on another node of an allocation runs in the
  // step that started its orted: SLURM_STEP_NUM_TASKS counts orteds.
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", "8");
  ScopedEnv step("SLURM_STEP_NUM_TASKS", "3");
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.kind, LaunchEnv::mpirun);
  EXPECT_EQ(e.value, "8");
  EXPECT_EQ(launch_error(world_of(8), e), "");
}

TEST(ReadLaunchEnv, SrunStepCountsTasks) {
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", nullptr);
  ScopedEnv step("SLURM_STEP_NUM_TASKS", "8");
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.kind, LaunchEnv::srun);
  EXPECT_EQ(e.variable, "SLURM_STEP_NUM_TASKS");
}

TEST(ReadLaunchEnv, TheJobsTaskCountIsNotALaunch) {
  // A single-rank debug run straight from a batch script of an 8-task job.
  ScopedEnv ompi("OMPI_COMM_WORLD_SIZE", nullptr);
  ScopedEnv step("SLURM_STEP_NUM_TASKS", nullptr);
  ScopedEnv job("SLURM_NTASKS", "8");
  const LaunchEnv e = read_launch_env();
  EXPECT_EQ(e.kind, LaunchEnv::none);
  EXPECT_EQ(launch_error(world_of(1), e), "");
}

TEST(CheckLaunch, SrunWithoutPmixIsNamed) {
  const std::string what =
      launch_error(world_of(1), {LaunchEnv::srun, "SLURM_STEP_NUM_TASKS", "8"});
  EXPECT_NE(what.find("srun started 8 tasks"), std::string::npos) << what;
  EXPECT_NE(what.find("MPI sees 1 rank:"), std::string::npos) << what;
  EXPECT_NE(what.find("--mpi=pmix"), std::string::npos) << what;
  EXPECT_NE(what.find("FSDP_LAUNCHER=mpirun"), std::string::npos) << what;
}

TEST(CheckLaunch, ForeignMpirunIsNamed) {
  const std::string what =
      launch_error(world_of(1), {LaunchEnv::mpirun, "OMPI_COMM_WORLD_SIZE", "4"});
  EXPECT_NE(what.find("mpirun started 4 ranks"), std::string::npos) << what;
  EXPECT_NE(what.find("another MPI"), std::string::npos) << what;
}

TEST(CheckLaunch, MatchingCountsPass) {
  EXPECT_EQ(launch_error(world_of(8), {LaunchEnv::srun, "SLURM_STEP_NUM_TASKS", "8"}), "");
  EXPECT_EQ(launch_error(world_of(5), {LaunchEnv::none, "", ""}), "");
}

TEST(CheckLaunch, RejectsGarbage) {
  for (const char* bad : {"4x", "0", "-2", "", "99999999999999999999"}) {
    const std::string what =
        launch_error(world_of(4), {LaunchEnv::srun, "SLURM_STEP_NUM_TASKS", bad});
    EXPECT_NE(what.find("is not a positive number of tasks"), std::string::npos) << bad;
  }
}

}  // namespace
}  // namespace fsdp
