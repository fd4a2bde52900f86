// The open-time token scan split across ranks: each rank checks its share,
// a bad token found by any rank fails every rank with the same message, and
// a step's sequences split over ranks are the one-rank step's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <set>

#include "common/error.h"
#include "data/batch_loader.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

int rank_of(MPI_Comm c) {
  int r = 0;
  MPI_Comm_rank(c, &r);
  return r;
}
int size_of(MPI_Comm c) {
  int n = 0;
  MPI_Comm_size(c, &n);
  return n;
}

// A directory every rank sees: rank 0's, made by rank 0.
class SharedDir {
 public:
  SharedDir() {
    if (rank_of(MPI_COMM_WORLD) == 0) dir_.emplace();
    std::string path = dir_ ? dir_->path().string() : std::string(4096, '\0');
    MPI_Bcast(path.data(), 4096, MPI_CHAR, 0, MPI_COMM_WORLD);
    path_ = path.c_str();
  }
  ~SharedDir() { MPI_Barrier(MPI_COMM_WORLD); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::optional<test::TempDir> dir_;
  std::string path_;
};

// Two files of 3000 and 5000 tokens; `bad` global offsets hold 999 (vocab 256).
std::string write_stream(const SharedDir& dir, const std::vector<int64_t>& bad) {
  if (rank_of(MPI_COMM_WORLD) == 0) {
    std::vector<int64_t> all = test::iota_tokens(8000, 256);
    for (int64_t b : bad) all[b] = 999;
    test::TokenFile a, c;
    a.values.assign(all.begin(), all.begin() + 3000);
    c.values.assign(all.begin() + 3000, all.end());
    test::write_token_file(dir.file("s0.h5"), a);
    test::write_token_file(dir.file("s1.h5"), c);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return dir.file("s*.h5");
}

std::string open_error(const std::string& spec) {
  try {
    TokenStream::open(spec, "--train-data", MPI_COMM_WORLD);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(StreamMpi, EachRankScansItsShare) {
  SharedDir dir;
  const auto s = TokenStream::open(write_stream(dir, {}), "--train-data", MPI_COMM_WORLD);
  const int world = size_of(MPI_COMM_WORLD);
  EXPECT_EQ(s.size(), 8000);
  EXPECT_LE(s.scanned_tokens(), 8000 / world + 1);
  int64_t mine = s.scanned_tokens(), total = 0;
  MPI_Allreduce(&mine, &total, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(total, 8000);
}

TEST(StreamMpi, BadTokenFoundByTheLastRankFailsEveryRank) {
  SharedDir dir;
  // Offset 7900 lies in the last rank's share (in the second file, at 4900).
  const auto msg = open_error(write_stream(dir, {7900}));
  EXPECT_EQ(msg, "--train-data: token 999 at offset 4900 of /tokens in '" + dir.file("s1.h5") +
                     "' is >= vocab_size 256; the file does not match its vocab_size attribute");
}

TEST(StreamMpi, TheStreamsFirstBadTokenIsReportedWhateverTheWorld) {
  SharedDir dir;
  const auto msg = open_error(write_stream(dir, {2500, 7999}));
  EXPECT_NE(msg.find("token 999 at offset 2500 of /tokens in '" + dir.file("s0.h5") + "'"),
            std::string::npos)
      << msg;
}

TEST(StreamMpi, ARankMissingAFileFailsEveryRank) {
  SharedDir dir;
  const std::string spec = write_stream(dir, {});
  const int last = size_of(MPI_COMM_WORLD) - 1;
  // Only the last rank asks for a file that does not exist.
  const std::string mine =
      rank_of(MPI_COMM_WORLD) == last ? spec + "," + dir.file("gone.h5") : spec;
  const auto msg = open_error(mine);
  EXPECT_NE(msg.find("gone.h5"), std::string::npos) << msg;
}

TEST(StreamMpi, RanksTogetherReadTheOneRankStep) {
  SharedDir dir;
  const auto s = TokenStream::open(write_stream(dir, {}), "--train-data", MPI_COMM_WORLD);
  const int world = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const int seq = 16, batch = 2, steps = 4;
  const int per_step = batch * 12;  // 12 divides by 1, 2, 3 and 4
  BatchLoader mine(s, seq, batch, 12 / world, rank, world, 5);
  BatchLoader one(s, seq, batch * 12, 1, 0, 1, 5, LoaderOptions{.prefetch_steps = 0});
  for (int step = 0; step < steps; ++step) {
    std::vector<int32_t> in(batch * seq), tg(batch * seq), firsts;
    for (int m = 0; m < 12 / world; ++m) {
      mine.next_micro_batch(m, in.data(), tg.data());
      for (int b = 0; b < batch; ++b) firsts.push_back(in[b * seq]);
    }
    std::vector<int32_t> all(per_step);
    MPI_Allgather(firsts.data(), static_cast<int>(firsts.size()), MPI_INT, all.data(),
                  static_cast<int>(firsts.size()), MPI_INT, MPI_COMM_WORLD);
    std::vector<int32_t> ref_in(per_step * seq), ref_tg(per_step * seq), ref;
    one.next_micro_batch(0, ref_in.data(), ref_tg.data());
    for (int b = 0; b < per_step; ++b) ref.push_back(ref_in[b * seq]);
    std::sort(all.begin(), all.end());
    std::sort(ref.begin(), ref.end());
    EXPECT_EQ(all, ref) << "step " << step;
    mine.end_step();
    one.end_step();
  }
}

}  // namespace
}  // namespace fsdp
