// The checkpoint directory's single-process parts: the run lock, the clean-up
// of crashed saves' .tmp files, and the space reservation of a save.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/dir.h"
#include "checkpoint/dir_lock.h"
#include "common/error.h"
#include "tests/common/error_of.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

class Dir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::path(::testing::TempDir()) /
            ("fsdp_ckdir_" + std::string(info->name()) + "." + std::to_string(::getpid())))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const std::string& name) { std::ofstream(fs::path(dir_) / name) << "x"; }
  bool has(const std::string& name) const { return fs::exists(fs::path(dir_) / name); }
  std::string dir_;
};

using testing::error_of;

std::string this_host() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

TEST_F(Dir, SecondLockIsRefusedNamingTheHolder) {
  std::string warning;
  DirLock first = DirLock::acquire(dir_, &warning);
  EXPECT_TRUE(first.held());
  EXPECT_EQ(warning, "");
  // A second open file description conflicts even within one process, as
  // a second run would.
  const std::string e = error_of([&] { DirLock::acquire(dir_, &warning); });
  EXPECT_NE(e.find("checkpoint directory '" + dir_ + "' is in use by another run"),
            std::string::npos)
      << e;
  EXPECT_NE(
      e.find("held by pid " + std::to_string(::getpid()) + " on host " + this_host() + " since "),
      std::string::npos)
      << e;
  EXPECT_NE(e.find("--checkpoint-dir"), std::string::npos) << e;
}

TEST_F(Dir, LockIsFreeAgainOnceReleased) {
  std::string warning;
  { DirLock first = DirLock::acquire(dir_, &warning); }
  DirLock again = DirLock::acquire(dir_, &warning);
  EXPECT_TRUE(again.held());
  // A moved-from lock must not release the moved-to one.
  DirLock moved = std::move(again);
  EXPECT_TRUE(moved.held());
  EXPECT_NE(error_of([&] { DirLock::acquire(dir_, &warning); }), "");
}

TEST_F(Dir, FileSystemWithoutLocksWarnsAndGoesOn) {
  for (int err : {ENOLCK, EOPNOTSUPP, ENOSYS}) {
    std::string warning;
    DirLock lock = DirLock::acquire(dir_, &warning, [err](int, int) {
      errno = err;
      return -1;
    });
    EXPECT_FALSE(lock.held());
    EXPECT_NE(warning.find("cannot lock checkpoint directory '" + dir_ + "'"), std::string::npos)
        << warning;
    EXPECT_NE(warning.find("nothing stops another run"), std::string::npos) << warning;
  }
  // Any other failure is an error, not a silent run without protection.
  std::string warning;
  const std::string e = error_of([&] {
    DirLock::acquire(dir_, &warning, [](int, int) {
      errno = EBADF;
      return -1;
    });
  });
  EXPECT_NE(e.find(DirLock::lock_path(dir_)), std::string::npos) << e;
}

TEST_F(Dir, StrayTmpFilesOfOurNamesOnlyAreRemoved) {
  for (const char* n : {"step_00000004.h5.tmp", "latest.tmp", "step_00000002.h5", "latest",
                        "notes.tmp", "step_abc.h5.tmp", "other.h5.tmp", ".write_probe.4242"})
    touch(n);
  fs::create_directories(fs::path(dir_) / "step_00000009.h5.tmp");  // not a file: left alone
  const std::vector<std::string> removed = CheckpointDir(dir_).remove_stray_tmp();
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_EQ(fs::path(removed[0]).filename(), ".write_probe.4242");
  EXPECT_EQ(fs::path(removed[1]).filename(), "latest.tmp");
  EXPECT_EQ(fs::path(removed[2]).filename(), "step_00000004.h5.tmp");
  EXPECT_FALSE(has(".write_probe.4242"));
  EXPECT_FALSE(has("step_00000004.h5.tmp"));
  EXPECT_FALSE(has("latest.tmp"));
  for (const char* n : {"step_00000002.h5", "latest", "notes.tmp", "step_abc.h5.tmp",
                        "other.h5.tmp", "step_00000009.h5.tmp"})
    EXPECT_TRUE(has(n)) << n;
}

TEST_F(Dir, ReserveSetsSpaceAsideAndReleaseGivesItBack) {
  const std::string path = (fs::path(dir_) / "step_00000001.h5.tmp").string();
  const int64_t bytes = 8 << 20;
  const int rc = CheckpointDir::reserve(path, bytes);
  if (rc == EOPNOTSUPP) GTEST_SKIP() << "this file system cannot fallocate; nothing to check";
  ASSERT_EQ(rc, 0);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);  // empty, so HDF5's create keeps the blocks
  EXPECT_GE(int64_t(st.st_blocks) * 512, bytes);
  std::ofstream(path, std::ios::app) << "data";
  CheckpointDir::release_reserve(path);
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 4);
  EXPECT_LT(int64_t(st.st_blocks) * 512, 1 << 20);
}

}  // namespace
}  // namespace fsdp
