#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>

#include "common/error.h"
#include "data/batch_loader.h"
#include "data/permutation.h"
#include "data/sampler.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

TEST(Permutation, IsABijection) {
  for (uint64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 17, 100, 1000, 4096, 4097, 65539}) {
    for (uint64_t key : {0ull, 1ull, 0xdeadbeefull}) {
      const Permutation p(n, key);
      std::vector<uint64_t> out(n);
      for (uint64_t i = 0; i < n; ++i) out[i] = p(i);
      std::sort(out.begin(), out.end());
      for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(out[i], i) << "n=" << n << " key=" << key;
    }
  }
}

TEST(Permutation, ShufflesAndDependsOnKey) {
  const uint64_t n = 1000;
  const Permutation a(n, 1), b(n, 1), c(n, 2);
  int fixed = 0, same_as_c = 0;
  for (uint64_t i = 0; i < n; ++i) {
    EXPECT_EQ(a(i), b(i));
    fixed += a(i) == i;
    same_as_c += a(i) == c(i);
  }
  // A random permutation has about one fixed point and one match with another.
  EXPECT_LT(fixed, 10);
  EXPECT_LT(same_as_c, 10);
}

TEST(Permutation, HugeDomainsStayInRange) {
  const uint64_t n = (uint64_t{1} << 62) - 3;
  const Permutation p(n, 42);
  for (uint64_t i : {uint64_t{0}, uint64_t{1}, n / 2, n - 1}) EXPECT_LT(p(i), n);
}

TEST(Sampler, WindowsAndShortData) {
  EXPECT_EQ(Sampler(1025, 1024, 0).windows_per_epoch(), 1);
  EXPECT_EQ(Sampler(2048, 1024, 0).windows_per_epoch(), 1);  // needs 2049 for two
  EXPECT_EQ(Sampler(2049, 1024, 0).windows_per_epoch(), 2);
  EXPECT_THROW(Sampler(1024, 1024, 0), Error);
  EXPECT_THROW(Sampler(0, 16, 0), Error);
  EXPECT_THROW(Sampler(100, 0, 0), Error);
}

TEST(Sampler, SameSeedSameOrderOtherSeedOther) {
  const Sampler a(100001, 10, 7), b(100001, 10, 7), c(100001, 10, 8);
  int differ = 0;
  for (int64_t p = 0; p < 30000; ++p) {
    ASSERT_EQ(a.window_of(p), b.window_of(p));
    differ += a.window_of(p) != c.window_of(p);
    ASSERT_EQ(a.window_start(p), a.window_of(p) * 10);
  }
  EXPECT_GT(differ, 29000);
}

TEST(Sampler, EveryEpochVisitsEveryWindowOnceInANewOrder) {
  for (int64_t windows : {1, 2, 5, 37, 64, 1000}) {
    const Sampler s(windows * 4 + 1, 4, 123);
    ASSERT_EQ(s.windows_per_epoch(), windows);
    std::vector<std::vector<int64_t>> orders;
    for (int64_t epoch = 0; epoch < 4; ++epoch) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < windows; ++i) {
        ASSERT_EQ(s.epoch_of(epoch * windows + i), epoch);
        order.push_back(s.window_of(epoch * windows + i));
      }
      auto sorted = order;
      std::sort(sorted.begin(), sorted.end());
      std::vector<int64_t> all(windows);
      std::iota(all.begin(), all.end(), 0);
      ASSERT_EQ(sorted, all) << "windows=" << windows << " epoch=" << epoch;
      orders.push_back(order);
    }
    if (windows >= 37) {
      EXPECT_NE(orders[0], orders[1]) << windows;
    }
  }
}

// A token file whose token i is i, so every row shows where it came from.
class LoaderTest : public ::testing::Test {
 protected:
  static constexpr int kSeqLen = 8;
  static constexpr int64_t kWindows = 37;

  void SetUp() override {
    test::TokenFile f;
    f.values = test::iota_tokens(kWindows * kSeqLen + 1 + 3, 1 << 20);  // 3 spare tokens
    f.type = H5T_STD_U32LE;
    f.vocab_size = 1 << 20;
    test::write_token_file(dir_.file("tokens.h5"), f);
    data_.emplace(TokenStream::open(dir_.file("tokens.h5"), "--train-data"));
  }

  using Rows = std::vector<std::vector<int32_t>>;

  // Rows [inputs..., last target] of one micro-batch, checking targets.
  static Rows rows(const std::vector<int32_t>& in, const std::vector<int32_t>& tg, int batch) {
    Rows out;
    for (int b = 0; b < batch; ++b) {
      std::vector<int32_t> row(in.begin() + b * kSeqLen, in.begin() + (b + 1) * kSeqLen);
      for (int t = 0; t + 1 < kSeqLen; ++t) EXPECT_EQ(tg[b * kSeqLen + t], row[t + 1]);
      row.push_back(tg[b * kSeqLen + kSeqLen - 1]);
      EXPECT_EQ(row[0] % kSeqLen, 0);  // window-aligned
      for (int t = 1; t <= kSeqLen; ++t) EXPECT_EQ(row[t], row[0] + t);
      out.push_back(row);
    }
    return out;
  }

  static Rows micro_batch(BatchLoader& loader, int micro, int batch) {
    std::vector<int32_t> in(batch * kSeqLen), tg(batch * kSeqLen);
    loader.next_micro_batch(micro, in.data(), tg.data());
    return rows(in, tg, batch);
  }

  // All rows of `steps` steps on one rank and world, keyed by their offset in the step.
  std::vector<Rows> run(int batch, int accum, int world, int steps, uint64_t seed) {
    const int per_step = batch * accum * world;
    std::vector<Rows> out(steps, Rows(per_step));
    for (int r = 0; r < world; ++r) {
      BatchLoader loader(*data_, kSeqLen, batch, accum, r, world, seed);
      EXPECT_EQ(loader.sequences_per_step(), per_step);
      for (int s = 0; s < steps; ++s) {
        for (int m = accum - 1; m >= 0; --m) {  // micro-batch order must not matter
          const Rows got = micro_batch(loader, m, batch);
          for (int b = 0; b < batch; ++b) {
            const int64_t p = loader.position(m, b);
            EXPECT_EQ(p, int64_t{s} * per_step + (m * world + r) * batch + b);
            out[s][p - int64_t{s} * per_step] = got[b];
          }
        }
        loader.end_step();
      }
    }
    return out;
  }

  test::TempDir dir_;
  std::optional<TokenStream> data_;
};

TEST_F(LoaderTest, StepContentsDoNotDependOnTheSplit) {
  // 12 sequences a step; 5 steps cross the 37-window epoch boundary.
  const auto reference = run(12, 1, 1, 5, 99);
  const int splits[][3] = {{1, 12, 1}, {2, 2, 3}, {3, 2, 2}, {1, 3, 4}, {2, 1, 6}, {1, 1, 12}};
  for (const auto& [batch, accum, world] : splits)
    EXPECT_EQ(run(batch, accum, world, 5, 99), reference)
        << "batch " << batch << " accum " << accum << " world " << world;
}

TEST_F(LoaderTest, RowsFollowTheSampler) {
  BatchLoader loader(*data_, kSeqLen, 4, 2, 1, 3, 5);
  const Sampler sampler(data_->size(), kSeqLen, 5);
  for (int s = 0; s < 4; ++s) {
    for (int m = 0; m < 2; ++m) {
      const Rows got = micro_batch(loader, m, 4);
      for (int b = 0; b < 4; ++b) EXPECT_EQ(got[b][0], sampler.window_start(loader.position(m, b)));
    }
    loader.end_step();
  }
  EXPECT_EQ(loader.step(), 4);
  EXPECT_EQ(loader.state().consumed, 4 * 24);
}

TEST_F(LoaderTest, FirstEpochCoversEveryWindowOnce) {
  BatchLoader loader(*data_, kSeqLen, 1, 1, 0, 1, 3);
  std::set<int32_t> starts;
  for (int s = 0; s < kWindows; ++s) {
    starts.insert(micro_batch(loader, 0, 1)[0][0]);
    loader.end_step();
  }
  EXPECT_EQ(starts.size(), static_cast<size_t>(kWindows));
  EXPECT_EQ(*starts.rbegin(), (kWindows - 1) * kSeqLen);  // spare tokens never start a window
}

TEST_F(LoaderTest, RestoreReproducesTheRest) {
  BatchLoader a(*data_, kSeqLen, 3, 2, 0, 2, 11);
  for (int s = 0; s < 4; ++s) {
    micro_batch(a, 0, 3);
    a.end_step();
  }
  const SamplerState saved = SamplerState::from_named(a.state().named(), 4, "saved state");
  EXPECT_EQ(saved, a.state());
  EXPECT_EQ(saved.step, 4);

  BatchLoader b(*data_, kSeqLen, 3, 2, 0, 2, /*seed, replaced by the state's*/ 12345);
  b.restore(saved);
  for (int s = 0; s < 6; ++s) {
    for (int m = 0; m < 2; ++m) EXPECT_EQ(micro_batch(a, m, 3), micro_batch(b, m, 3));
    a.end_step();
    b.end_step();
  }
  EXPECT_EQ(a.state(), b.state());
}

TEST_F(LoaderTest, RestoreOnAnotherWorldSizeContinuesThePositions) {
  // 4 steps of 12 on one rank, then resumed on 3 ranks with 4 per step each.
  BatchLoader a(*data_, kSeqLen, 12, 1, 0, 1, 21);
  for (int s = 0; s < 4; ++s) a.end_step();
  const auto state = a.state();
  const Rows next_reference = micro_batch(a, 0, 12);
  for (int r = 0; r < 3; ++r) {
    BatchLoader b(*data_, kSeqLen, 2, 2, r, 3, 21);
    b.restore(state);
    for (int m = 0; m < 2; ++m) {
      const Rows got = micro_batch(b, m, 2);
      for (int row = 0; row < 2; ++row) EXPECT_EQ(got[row], next_reference[(m * 3 + r) * 2 + row]);
    }
  }
}

TEST(SamplerState, RoundTripsEverySeedBit) {
  const SamplerState s{0xfedcba9876543210ull, 17, 1234};
  EXPECT_EQ(SamplerState::from_named(s.named(), 17, "state"), s);
  EXPECT_EQ(SamplerState::kNames.size(), s.named().size());
}

// The message from_named throws for `named` at `step`, or "" if none.
std::string named_error(const SamplerState::Named& named, int64_t step) {
  try {
    SamplerState::from_named(named, step, "checkpoint 'c.h5' is damaged: /sampler");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A checkpoint's stored state is untrusted: every way it can be wrong is
// refused by name, in any order of the names.
TEST(SamplerState, FromNamedRefusesWhatNoRunSaves) {
  const SamplerState::Named good = {{"consumed", 24}, {"seed", -5}, {"step", 3}};
  EXPECT_EQ(named_error(good, 3), "");
  EXPECT_EQ(SamplerState::from_named(good, 3, "x"), (SamplerState{uint64_t(int64_t{-5}), 3, 24}));

  const std::string prefix = "checkpoint 'c.h5' is damaged: /sampler";
  SamplerState::Named extra = good;
  extra.emplace_back("epoch", 1);
  EXPECT_EQ(named_error(extra, 3), prefix + " has an attribute 'epoch' this build does not write");
  SamplerState::Named twice = good;
  twice.emplace_back("seed", 1);
  EXPECT_EQ(named_error(twice, 3), prefix + " has 'seed' twice");
  const SamplerState::Named missing = {{"seed", 1}, {"step", 3}};
  EXPECT_EQ(named_error(missing, 3),
            prefix + " lacks 'consumed', so it cannot continue the data order");
  EXPECT_EQ(named_error(good, 4), prefix + ": its 'step' is 3 but it was saved at step 4");
  EXPECT_EQ(named_error({{"seed", 1}, {"step", 3}, {"consumed", -1}}, 3),
            prefix + ": its 'consumed' is -1; at step 3 it must be between 0 and 6442450944");
  // The most 3 steps can consume (3 * 2^31) is accepted; one more is not.
  EXPECT_EQ(named_error({{"seed", 1}, {"step", 3}, {"consumed", 6442450944}}, 3), "");
  EXPECT_NE(named_error({{"seed", 1}, {"step", 3}, {"consumed", 6442450945}}, 3), "");
  // Past 2^31 steps the bound is capped at 2^62, not overflowed.
  const int64_t far = int64_t{1} << 40;
  EXPECT_EQ(named_error({{"seed", 1}, {"step", far}, {"consumed", int64_t{1} << 62}}, far), "");
  EXPECT_NE(named_error({{"seed", 1}, {"step", far}, {"consumed", (int64_t{1} << 62) + 1}}, far),
            "");
}

TEST_F(LoaderTest, RejectsBadShapes) {
  EXPECT_THROW(BatchLoader(*data_, 0, 1, 1, 0, 1, 0), Error);
  EXPECT_THROW(BatchLoader(*data_, 8, 0, 1, 0, 1, 0), Error);
  EXPECT_THROW(BatchLoader(*data_, 8, 1, 0, 0, 1, 0), Error);
  EXPECT_THROW(BatchLoader(*data_, 8, 1, 1, 2, 2, 0), Error);
  try {
    BatchLoader(*data_, 1000, 1, 1, 0, 1, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("--train-data: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("seq_len 1000"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs at least 1001"), std::string::npos) << msg;
  }
}

TEST_F(LoaderTest, ValidationBatchesAreInOrderAndSplitByRank) {
  const int batch = 2, world = 3;
  std::vector<ValBatches> ranks;
  for (int r = 0; r < world; ++r) ranks.emplace_back(*data_, kSeqLen, batch, r, world);
  EXPECT_EQ(ranks[0].windows(), kWindows);
  for (int64_t i = 0; i < 10; ++i) {  // 60 rows: wraps past the 37 windows
    for (int r = 0; r < world; ++r) {
      std::vector<int32_t> in(batch * kSeqLen), tg(batch * kSeqLen);
      ranks[r].get(i, in.data(), tg.data());
      const Rows got = rows(in, tg, batch);
      for (int b = 0; b < batch; ++b)
        EXPECT_EQ(got[b][0], ((i * world + r) * batch + b) % kWindows * kSeqLen);
      // Same request, same answer.
      std::vector<int32_t> again(batch * kSeqLen), tg2(batch * kSeqLen);
      ValBatches(*data_, kSeqLen, batch, r, world).get(i, again.data(), tg2.data());
      EXPECT_EQ(in, again);
      EXPECT_EQ(tg, tg2);
    }
  }
}

}  // namespace
}  // namespace fsdp
