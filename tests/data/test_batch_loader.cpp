// BatchLoader's reader thread: same batches as synchronous reads, exact
// resume across epoch boundaries and world sizes, bounded buffers, errors.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "common/error.h"
#include "common/hdf5_lock.h"
#include "data/batch_loader.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

constexpr int kSeqLen = 8;

using Rows = std::vector<std::vector<int32_t>>;  // [inputs..., last target] per row

Rows micro_batch(BatchLoader& loader, int micro, int batch) {
  std::vector<int32_t> in(batch * kSeqLen), tg(batch * kSeqLen);
  loader.next_micro_batch(micro, in.data(), tg.data());
  Rows out;
  for (int b = 0; b < batch; ++b) {
    std::vector<int32_t> row(in.begin() + b * kSeqLen, in.begin() + (b + 1) * kSeqLen);
    row.push_back(tg[b * kSeqLen + kSeqLen - 1]);
    out.push_back(row);
  }
  return out;
}

struct Shape {
  int batch, accum, world;
  int64_t per_step() const { return int64_t{batch} * accum * world; }
};

// Steps [0, steps) of every rank, rows keyed by their position in the step;
// `restore_at` >= 0 moves every rank to a fresh loader from the state saved
// after that many steps.
std::vector<Rows> run(const TokenStream& data, Shape s, int steps, uint64_t seed,
                      LoaderOptions opt = {}, int restore_at = -1,
                      std::optional<SamplerState> start = std::nullopt) {
  std::vector<Rows> out(steps);
  for (int r = 0; r < s.world; ++r) {
    auto loader =
        std::make_unique<BatchLoader>(data, kSeqLen, s.batch, s.accum, r, s.world, seed, opt);
    if (start) loader->restore(*start);
    const int first = static_cast<int>(loader->step());
    for (int step = first; step < first + steps; ++step) {
      if (step == restore_at) {
        const auto saved = SamplerState::from_named(loader->state().named(), step, "saved state");
        loader = std::make_unique<BatchLoader>(data, kSeqLen, s.batch, s.accum, r, s.world,
                                               seed + 1, opt);
        loader->restore(saved);
      }
      out[step - first].resize(loader->sequences_per_step());
      for (int m = loader->micro_batches() - 1; m >= 0; --m) {
        const Rows got = micro_batch(*loader, m, s.batch);
        for (int b = 0; b < s.batch; ++b)
          out[step - first][loader->position(m, b) - loader->state().consumed] = got[b];
      }
      loader->end_step();
    }
  }
  return out;
}

class BatchLoaderTest : public ::testing::Test {
 protected:
  // 36 windows of 8: steps of 6 end an epoch exactly every 6 steps, steps of
  // 8 straddle the boundary.
  static constexpr int64_t kWindows = 36;

  void SetUp() override {
    const std::vector<int64_t> sizes = {10 * kSeqLen + 1, 5, 26 * kSeqLen + 3};
    std::string spec;
    int64_t next = 0;
    for (size_t f = 0; f < sizes.size(); ++f) {
      test::TokenFile t;
      t.type = H5T_STD_U32LE;
      t.vocab_size = 1 << 20;
      for (int64_t i = 0; i < sizes[f]; ++i) t.values.push_back(next++);
      test::write_token_file(dir_.file("f" + std::to_string(f) + ".h5"), t);
    }
    data_.emplace(TokenStream::open(dir_.file("f*.h5"), "--train-data"));
  }

  test::TempDir dir_;
  std::optional<TokenStream> data_;
};

TEST_F(BatchLoaderTest, RowsAreWindowsOfTheStream) {
  BatchLoader loader(*data_, kSeqLen, 4, 2, 1, 2, 7);
  EXPECT_EQ(loader.sampler().windows_per_epoch(), kWindows);
  for (int s = 0; s < 12; ++s) {
    for (int m = 0; m < 2; ++m) {
      const Rows rows = micro_batch(loader, m, 4);
      for (int b = 0; b < 4; ++b) {
        const int64_t start = loader.window_start(loader.position(m, b));
        for (int t = 0; t <= kSeqLen; ++t) ASSERT_EQ(rows[b][t], start + t);
      }
    }
    loader.end_step();
  }
}

TEST_F(BatchLoaderTest, PrefetchGivesTheSynchronousBatches) {
  const Shape shape{2, 3, 2};
  const auto sync = run(*data_, shape, 15, 3, LoaderOptions{.prefetch_steps = 0});
  for (int ahead : {1, 2, 5})
    EXPECT_EQ(run(*data_, shape, 15, 3, LoaderOptions{.prefetch_steps = ahead}), sync);
  // Same set of sequences per step on any split.
  EXPECT_EQ(run(*data_, Shape{12, 1, 1}, 15, 3), sync);
  EXPECT_EQ(run(*data_, Shape{1, 4, 3}, 15, 3), sync);
}

TEST_F(BatchLoaderTest, ResumeIsExactMidEpochAndAtEpochBoundaries) {
  for (const Shape shape : {Shape{3, 2, 1}, Shape{2, 2, 2}}) {  // 6 and 8 a step
    const auto straight = run(*data_, shape, 14, 11);
    // 6 a step: after 2 (mid-epoch), 5 (one step before the boundary), 6 (on
    // it), 7 (just past it). 8 a step: step 4 straddles the boundary.
    for (int at : {2, 4, 5, 6, 7}) {
      EXPECT_EQ(run(*data_, shape, 14, 11, {}, at), straight) << shape.per_step() << " " << at;
      EXPECT_EQ(run(*data_, shape, 14, 11, LoaderOptions{.prefetch_steps = 0}, at), straight);
    }
  }
}

TEST_F(BatchLoaderTest, ResumeOnAnotherWorldSizeWithTheSameGlobalBatch) {
  const auto straight = run(*data_, Shape{3, 1, 4}, 14, 5);
  // Save after 5 steps at 4 ranks, continue on 3, 2 and 1.
  BatchLoader saver(*data_, kSeqLen, 3, 1, 0, 4, 5);
  for (int s = 0; s < 5; ++s) saver.end_step();
  const std::vector<Rows> rest(straight.begin() + 5, straight.end());
  for (const Shape other : {Shape{4, 1, 3}, Shape{2, 3, 2}, Shape{6, 2, 1}})
    EXPECT_EQ(run(*data_, other, 9, 999, {}, -1, saver.state()), rest) << other.world;
}

// --batch-warmup-steps: steps of fewer micro-batches read the positions the
// constant batch would, in order, only fewer a step; prefetch and a resume
// in the ramp give the same rows.
TEST_F(BatchLoaderTest, GrowingMicroBatchesKeepTheDataOrder) {
  const Shape shape{2, 3, 2};
  const std::vector<int> ramp = {1, 1, 2, 1, 3, 2, 3};  // then 3; not monotone on purpose
  LoaderOptions growing{.prefetch_steps = 2, .micro_batches = [&](int64_t s) {
                          return s < int64_t(ramp.size()) ? ramp[s] : 3;
                        }};
  const auto sync = run(*data_, shape, 15, 3,
                        LoaderOptions{.prefetch_steps = 0, .micro_batches = growing.micro_batches});
  EXPECT_EQ(run(*data_, shape, 15, 3, growing), sync);
  for (int at : {1, 3, 5, 8}) EXPECT_EQ(run(*data_, shape, 15, 3, growing, at), sync) << at;
  Rows all_growing, all_constant;
  for (const Rows& step : sync) all_growing.insert(all_growing.end(), step.begin(), step.end());
  for (const Rows& step : run(*data_, shape, 15, 3))
    all_constant.insert(all_constant.end(), step.begin(), step.end());
  int64_t want = 0;
  for (int s = 0; s < 15; ++s) {
    const int a = s < int64_t(ramp.size()) ? ramp[s] : 3;
    EXPECT_EQ(int64_t(sync[s].size()), int64_t{a} * 2 * 2) << s;
    want += int64_t{a} * 2 * 2;
  }
  ASSERT_EQ(int64_t(all_growing.size()), want);
  all_constant.resize(all_growing.size());
  EXPECT_EQ(all_growing, all_constant);
  // The state counts the positions read; a step past the ramp reads 12.
  BatchLoader loader(*data_, kSeqLen, 2, 3, 0, 2, 3, growing);
  for (int s = 0; s < 8; ++s) loader.end_step();
  EXPECT_EQ(loader.state().consumed, (1 + 1 + 2 + 1 + 3 + 2 + 3 + 3) * 4);
  EXPECT_EQ(loader.sequences_per_step(), 12);
}

TEST_F(BatchLoaderTest, RestoreDropsWhatWasReadAhead) {
  BatchLoader a(*data_, kSeqLen, 2, 1, 0, 1, 1, LoaderOptions{.prefetch_steps = 4});
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let it fill the queue
  for (int s = 0; s < 3; ++s) {
    micro_batch(a, 0, 2);
    a.end_step();
  }
  const SamplerState other{77, 9, 31};
  a.restore(other);
  BatchLoader b(*data_, kSeqLen, 2, 1, 0, 1, 0, LoaderOptions{.prefetch_steps = 0});
  b.restore(other);
  for (int s = 0; s < 40; ++s) {
    ASSERT_EQ(micro_batch(a, 0, 2), micro_batch(b, 0, 2)) << s;
    a.end_step();
    b.end_step();
  }
  EXPECT_EQ(a.state(), b.state());
}

TEST_F(BatchLoaderTest, BufferDoesNotGrowWithTheDataset) {
  test::TokenFile big;
  big.values = test::iota_tokens(2'000'000, 256);
  test::write_token_file(dir_.file("big.h5"), big);
  const auto large = TokenStream::open(dir_.file("big.h5"), "--train-data");
  const BatchLoader small_loader(*data_, kSeqLen, 4, 2, 0, 1, 0,
                                 LoaderOptions{.prefetch_steps = 3});
  const BatchLoader large_loader(large, kSeqLen, 4, 2, 0, 1, 0, LoaderOptions{.prefetch_steps = 3});
  EXPECT_EQ(small_loader.buffer_bytes(), large_loader.buffer_bytes());
  EXPECT_EQ(large_loader.buffer_bytes(), 3 * 4 * 2 * (kSeqLen + 1) * 4);
}

TEST_F(BatchLoaderTest, WaitTimeIsMeasuredPerStep) {
  BatchLoader loader(*data_, kSeqLen, 2, 2, 0, 1, 1, LoaderOptions{.prefetch_steps = 0});
  double sum = 0;
  for (int s = 0; s < 5; ++s) {
    micro_batch(loader, 0, 2);
    micro_batch(loader, 1, 2);
    loader.end_step();
    EXPECT_GT(loader.last_step_wait_seconds(), 0.0);  // synchronous: every read is waited for
    sum += loader.last_step_wait_seconds();
  }
  EXPECT_DOUBLE_EQ(loader.wait_seconds(), sum);
  loader.end_step();  // a step with no reads waited for nothing
  EXPECT_EQ(loader.last_step_wait_seconds(), 0.0);
}

// Where the tokens of a contiguous dataset lie in its file: (offset, bytes).
std::pair<haddr_t, hsize_t> token_bytes(const std::string& path) {
  Hdf5Lock lock;
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t dset = H5Dopen2(file, "/tokens", H5P_DEFAULT);
  const std::pair<haddr_t, hsize_t> out{H5Dget_offset(dset), H5Dget_storage_size(dset)};
  H5Dclose(dset);
  H5Fclose(file);
  return out;
}

// Overwrites those bytes with 0xff, behind the open reader's back.
void corrupt_tokens(const std::string& path, std::pair<haddr_t, hsize_t> where) {
  const auto [offset, bytes] = where;
  ASSERT_NE(offset, HADDR_UNDEF);
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  const std::string ff(bytes, '\xff');
  f.write(ff.data(), static_cast<std::streamsize>(ff.size()));
  ASSERT_TRUE(f.good());
}

TEST(BatchLoaderErrors, ReaderThreadErrorsSurfaceInTheCaller) {
  for (int ahead : {0, 2}) {
    test::TempDir dir;
    const auto path = dir.file("changing.h5");
    test::TokenFile t;
    t.values = test::iota_tokens(1'000'000, 256);
    t.chunked = false;  // no chunk cache holding the old values
    test::write_token_file(path, t);
    const auto where = token_bytes(path);
    const auto data = TokenStream::open(path, "--train-data");
    BatchLoader loader(data, kSeqLen, 8, 2, 0, 1, 4, LoaderOptions{.prefetch_steps = ahead});
    if (ahead) std::this_thread::sleep_for(std::chrono::milliseconds(50));  // reads 2 steps
    corrupt_tokens(path, where);
    std::string msg;
    int step = 0;
    for (; step < 20 && msg.empty(); ++step) {
      try {
        micro_batch(loader, 0, 8);
        micro_batch(loader, 1, 8);
        loader.end_step();
      } catch (const Error& e) {
        msg = e.what();
      }
    }
    EXPECT_LE(step, ahead + 1) << "steps read before the change may be served, no more";
    EXPECT_EQ(msg.rfind("--train-data: token 65535 at offset ", 0), 0u) << msg;
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    // The error stays; and destruction, with the thread ended, does not hang.
    EXPECT_THROW(micro_batch(loader, 0, 8), Error);
  }
}

}  // namespace
}  // namespace fsdp
