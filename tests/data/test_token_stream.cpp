// Several files as one stream: expansion, order, agreement, reads, windows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "common/error.h"
#include "data/batch_loader.h"
#include "data/sampler.h"
#include "data/token_stream.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// Token `o` of file `f` is f * 1000 + o, so every value tells where it came from.
void write_file(const std::string& path, int f, int64_t n, int64_t vocab = 1 << 20) {
  test::TokenFile spec;
  spec.type = H5T_STD_U32LE;
  spec.vocab_size = vocab;
  for (int64_t o = 0; o < n; ++o) spec.values.push_back(f * 1000 + o);
  test::write_token_file(path, spec);
}

std::string open_error(const std::string& spec) {
  try {
    TokenStream::open(spec, "--train-data");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TokenStream, ExpandKeepsListOrderAndSortsGlobs) {
  test::TempDir dir;
  for (const char* name : {"s_02.h5", "s_10.h5", "s_01.h5", "other.h5"})
    write_file(dir.file(name), 0, 4);
  const auto list =
      TokenStream::expand(dir.file("s_10.h5") + "," + dir.file("s_01.h5") + ":/x", "--train-data");
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].file, dir.file("s_10.h5"));
  EXPECT_EQ(list[1].file, dir.file("s_01.h5"));
  EXPECT_EQ(list[1].dataset, "/x");

  const auto glob = TokenStream::expand(
      dir.file("other.h5") + "," + dir.file("s_*.h5") + ":/tokens", "--train-data");
  std::vector<std::string> files;
  for (const auto& s : glob) files.push_back(s.file);
  EXPECT_EQ(files, (std::vector<std::string>{dir.file("other.h5"), dir.file("s_01.h5"),
                                             dir.file("s_02.h5"), dir.file("s_10.h5")}));

  const auto none = open_error(dir.file("nope_*.h5"));
  EXPECT_HAS(none, "--train-data: '" + dir.file("nope_*.h5") + "' matches no files");
  EXPECT_HAS(open_error(dir.file("s_01.h5") + ",," + dir.file("s_02.h5")), "empty entry");
}

TEST(TokenStream, ConcatenatesInOrderAndReads) {
  test::TempDir dir;
  const int64_t sizes[] = {25, 3, 17};
  for (int f = 0; f < 3; ++f) write_file(dir.file("p" + std::to_string(f) + ".h5"), f, sizes[f]);
  const auto s = TokenStream::open(dir.file("p*.h5"), "--train-data");
  ASSERT_EQ(s.num_files(), 3u);
  EXPECT_EQ(s.size(), 45);
  EXPECT_EQ(s.file_begin(2), 28);
  EXPECT_EQ(s.describe(), "'" + dir.file("p0.h5") + "' and 2 more files");
  EXPECT_EQ(s.locate(27), (std::pair<size_t, int64_t>{1, 2}));
  EXPECT_EQ(s.locate(28), (std::pair<size_t, int64_t>{2, 0}));

  std::vector<int32_t> all(45);
  for (size_t f = 0; f < 3; ++f)
    s.read(s.file_begin(f), s.file_size(f), all.data() + s.file_begin(f));
  for (int64_t g = 0; g < 45; ++g) {
    const auto [f, o] = s.locate(g);
    ASSERT_EQ(all[g], static_cast<int32_t>(f * 1000 + o)) << g;
  }
  EXPECT_THROW(s.read(20, 10, all.data()), Error);  // spans two files

  // Touching, overlapping, duplicate and out-of-order ranges in one call.
  std::vector<int32_t> a(5), b(5), c(5), d(3), e(2);
  s.read({{10, 5, a.data()},
          {0, 5, b.data()},
          {12, 5, c.data()},
          {28, 3, d.data()},
          {10, 2, e.data()}});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a[i], 10 + i);
    EXPECT_EQ(b[i], i);
    EXPECT_EQ(c[i], 12 + i);
  }
  EXPECT_EQ(d, (std::vector<int32_t>{2000, 2001, 2002}));
  EXPECT_EQ(e, (std::vector<int32_t>{10, 11}));
}

TEST(TokenStream, WindowsNeverSpanFiles) {
  test::TempDir dir;
  // seq_len 4: 25 tokens hold 6 windows, 3 hold none, 17 hold 4.
  const int64_t sizes[] = {25, 3, 17};
  std::string spec;
  for (int f = 0; f < 3; ++f) {
    write_file(dir.file("w" + std::to_string(f) + ".h5"), f, sizes[f]);
    spec += (f ? "," : "") + dir.file("w" + std::to_string(f) + ".h5");
  }
  const auto s = TokenStream::open(spec, "--train-data");
  const WindowIndex index(s, 4);
  ASSERT_EQ(index.count(), 10);
  for (int64_t w = 0; w < 10; ++w) {
    const int64_t start = index.start(w);
    const auto [f, o] = s.locate(start);
    EXPECT_LE(o + 5, s.file_size(f)) << w;
    EXPECT_EQ(o % 4, 0) << w;
    EXPECT_EQ(f, w < 6 ? 0u : 2u) << w;
  }
  EXPECT_THROW(index.start(10), Error);
  // One file: the windows the single-file sampler always used.
  const auto one = TokenStream::open(dir.file("w0.h5"), "--train-data");
  EXPECT_EQ(WindowIndex(one, 4).count(), Sampler(25, 4, 0).windows_per_epoch());
  EXPECT_EQ(Sampler::for_windows(6, 4, 0).windows_per_epoch(), 6);
}

// Every window of the stream in one read() call, in the order given: the
// merging of touching ranges must never carry a range into the next file.
void expect_windows_read_whole(const TokenStream& s, int seq_len, std::vector<int64_t> order) {
  const WindowIndex index(s, seq_len);
  const int64_t row = seq_len + 1;
  std::vector<int32_t> out(order.size() * static_cast<size_t>(row), -1);
  std::vector<TokenRange> ranges;
  for (size_t i = 0; i < order.size(); ++i)
    ranges.push_back(TokenRange{index.start(order[i]), row, out.data() + i * row});
  ASSERT_NO_THROW(s.read(ranges));
  for (size_t i = 0; i < order.size(); ++i) {
    const auto [f, o] = s.locate(index.start(order[i]));
    for (int64_t t = 0; t < row; ++t)
      ASSERT_EQ(out[i * row + t], static_cast<int32_t>(f * 1000 + o + t))
          << "window " << order[i] << " token " << t;
  }
}

std::string write_files(const test::TempDir& dir, const std::string& stem,
                        const std::vector<int64_t>& sizes) {
  std::string spec;
  for (size_t f = 0; f < sizes.size(); ++f) {
    const std::string path = dir.file(stem + std::to_string(100 + f) + ".h5");
    write_file(path, static_cast<int>(f), sizes[f]);
    spec += (f ? "," : "") + path;
  }
  return spec;
}

// Issue 9, case 9: a window ending on a file's last token touches the next
// file's first window; read together they were merged into one range across
// the boundary ("tokens up to N span two files").
TEST(TokenStream, ReadsWindowsThatEndExactlyAtAFileEnd) {
  const int seq_len = 4;
  const std::vector<std::vector<int64_t>> layouts = {
      {5, 5},              // two files of exactly one window each
      {9, 5, 13},          // every file's last window ends on its last token
      {5, 2, 1, 5, 3, 9},  // files shorter than a window between them
      {1, 5, 4, 5},        // a short file first, one of exactly seq_len tokens
  };
  for (const auto& sizes : layouts) {
    test::TempDir dir;
    const auto s = TokenStream::open(write_files(dir, "f", sizes), "--train-data");
    const int64_t n = WindowIndex(s, seq_len).count();
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t w = 0; w < n; ++w) order[static_cast<size_t>(w)] = w;
    SCOPED_TRACE(::testing::PrintToString(sizes));
    expect_windows_read_whole(s, seq_len, order);
    std::reverse(order.begin(), order.end());
    expect_windows_read_whole(s, seq_len, order);
    // Whole files, each touching the next, in one call.
    std::vector<int32_t> all(static_cast<size_t>(s.size()), -1);
    std::vector<TokenRange> files;
    for (size_t f = 0; f < s.num_files(); ++f)
      files.push_back(TokenRange{s.file_begin(f), s.file_size(f), all.data() + s.file_begin(f)});
    ASSERT_NO_THROW(s.read(files));
    for (int64_t g = 0; g < s.size(); ++g) {
      const auto [f, o] = s.locate(g);
      ASSERT_EQ(all[g], static_cast<int32_t>(f * 1000 + o)) << g;
    }
  }
}

TEST(TokenStream, ManyTinyFilesOfOneWindowEach) {
  test::TempDir dir;
  const int seq_len = 2;
  // 40 files of seq_len + 1 tokens, with one-token files between some.
  std::vector<int64_t> sizes;
  for (int f = 0; f < 40; ++f) sizes.push_back(f % 5 == 4 ? 1 : seq_len + 1);
  const auto s = TokenStream::open(write_files(dir, "t", sizes), "--train-data");
  const int64_t n = WindowIndex(s, seq_len).count();
  ASSERT_EQ(n, 32);
  std::vector<int64_t> order;
  for (int64_t w = 0; w < n; ++w) order.push_back((w * 7) % n);  // every window, shuffled
  expect_windows_read_whole(s, seq_len, order);
  // The batch loader reads a whole step in one call: 16 windows per micro-batch.
  BatchLoader loader(s, seq_len, 16, 2, 0, 1, 5);
  std::vector<int32_t> in(32), tgt(32);
  for (int step = 0; step < 3; ++step) {
    for (int m = 0; m < 2; ++m) {
      ASSERT_NO_THROW(loader.next_micro_batch(m, in.data(), tgt.data()));
      // Each row is one window: consecutive tokens of one file.
      for (int r = 0; r < 16; ++r) {
        const int32_t first = in[r * seq_len];
        ASSERT_EQ(in[r * seq_len + 1], first + 1) << step << " " << m << " " << r;
        ASSERT_EQ(tgt[r * seq_len], first + 1) << step << " " << m << " " << r;
        ASSERT_EQ(tgt[r * seq_len + 1], first + 2) << step << " " << m << " " << r;
      }
    }
    loader.end_step();
  }
}

TEST(TokenStream, ManyFilesKeepFewOpen) {
  test::TempDir dir;
  const int n = static_cast<int>(TokenStream::kMaxOpenFiles) + 5;
  for (int f = 0; f < n; ++f) write_file(dir.file(std::to_string(100 + f) + "_m.h5"), f, 9);
  const auto s = TokenStream::open(dir.file("*_m.h5"), "--train-data");
  ASSERT_EQ(s.num_files(), static_cast<size_t>(n));
  int32_t t = 0;
  for (int round = 0; round < 2; ++round) {
    for (int f = n - 1; f >= 0; f -= 3) {
      s.read(s.file_begin(f) + 7, 1, &t);
      ASSERT_EQ(t, f * 1000 + 7);
    }
  }
}

TEST(TokenStreamErrors, VocabMismatchNamesBothFiles) {
  test::TempDir dir;
  write_file(dir.file("a.h5"), 0, 10, 5000);
  write_file(dir.file("b.h5"), 0, 10, 6000);
  const auto msg = open_error(dir.file("a.h5") + "," + dir.file("b.h5"));
  EXPECT_EQ(msg.rfind("--train-data: vocab_size 6000 of ", 0), 0u) << msg;
  EXPECT_HAS(msg, dir.file("a.h5"));
  EXPECT_HAS(msg, dir.file("b.h5"));
  EXPECT_HAS(msg, "5000");
  EXPECT_EQ(msg.find('\n'), std::string::npos);
}

TEST(TokenStreamErrors, BadTokenInSecondFileNamesItAndItsOffset) {
  test::TempDir dir;
  write_file(dir.file("a.h5"), 0, 50, 256);
  test::TokenFile spec;  // uint16, vocab_size 256
  spec.values = test::iota_tokens(100, 200);
  spec.values[73] = 999;
  test::write_token_file(dir.file("b.h5"), spec);
  const auto msg = open_error(dir.file("a.h5") + "," + dir.file("b.h5"));
  EXPECT_EQ(msg, "--train-data: token 999 at offset 73 of /tokens in '" + dir.file("b.h5") +
                     "' is >= vocab_size 256; the file does not match its vocab_size attribute");
}

TEST(TokenStreamErrors, TooShortForOneWindow) {
  test::TempDir dir;
  write_file(dir.file("a.h5"), 0, 6);
  write_file(dir.file("b.h5"), 0, 8);
  const auto s = TokenStream::open(dir.file("*.h5"), "--train-data");
  EXPECT_NO_THROW(s.require_min_tokens(8, "x"));
  try {
    s.require_min_tokens(9, "one sequence of --seq-len 8");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_HAS(e.what(), "--train-data: the longest of the 2 files");
    EXPECT_HAS(e.what(), dir.file("b.h5"));
    EXPECT_HAS(e.what(), "has 8 tokens, but one sequence of --seq-len 8 needs at least 9");
  }
}

}  // namespace
}  // namespace fsdp
