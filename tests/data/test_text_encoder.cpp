// TextEncoder and GPT-2's pre-tokenizer (data/text_encoder.h): the pieces the
// pattern finds, the two BPE rules on a vocabulary small enough to follow by
// hand, and bad tables or text as one error naming the file or the text. The
// real tokenizers (tiktoken's gpt2, Hugging Face BPE) are compared id for id
// in text_encoder_test.py.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <array>
#include <string>
#include <vector>

#include "common/error.h"
#include "data/gpt2_pretokenize.h"
#include "data/text_encoder.h"
#include "tests/common/error_of.h"
#include "tests/data/h5_test_file.h"

namespace fsdp {
namespace {

using test::TempDir;
using test::TokenFile;
using test::write_1d;
using testing::error_of;

std::vector<std::string> pieces(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : gpt2_pieces(text)) out.emplace_back(p);
  return out;
}

// Each expectation is what Python's `regex` module finds with GPT-2's pattern.
TEST(Gpt2Pieces, FollowThePattern) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(pieces("it's"), (V{"it", "'s"}));
  EXPECT_EQ(pieces("I'll 've"), (V{"I", "'ll", " '", "ve"}));
  EXPECT_EQ(pieces("a  b"), (V{"a", " ", " b"}));
  EXPECT_EQ(pieces("a\n\nb"), (V{"a", "\n", "\n", "b"}));
  EXPECT_EQ(pieces("a \n b"), (V{"a", " \n", " b"}));
  EXPECT_EQ(pieces("x   "), (V{"x", "   "}));
  EXPECT_EQ(pieces("caf\xC3\xA9 123 ok!!"), (V{"caf\xC3\xA9", " 123", " ok", "!!"}));
  EXPECT_EQ(pieces("\xE6\x97\xA5\xE6\x9C\xAC"), (V{"\xE6\x97\xA5\xE6\x9C\xAC"}));
  EXPECT_EQ(pieces("2,000"), (V{"2", ",", "000"}));
  EXPECT_EQ(pieces("\xC2\xA0"
                   "a"),
            (V{"\xC2\xA0", "a"}));  // a no-break space is \s
  EXPECT_EQ(pieces(""), V{});
}

void write_2d_int32(hid_t file, const char* name, const std::vector<std::array<int32_t, 3>>& rows) {
  const hsize_t dims[2] = {rows.size(), 3};
  const hid_t space = H5Screate_simple(2, dims, nullptr);
  const hid_t d =
      H5Dcreate2(file, name, H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (!rows.empty()) H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data());
  H5Dclose(d);
  H5Sclose(space);
}

// Vocabulary: 0 "a", 1 "b", 2 "c", 3 "ab", 4 "bc", 5 "abc", 6 " ", 7 "<eot>".
// Its merges: (a, b) first, then (b, c); none joins "ab" and "c", so the
// merges rule never reaches 5, while the ranks rule takes "abc" whole.
const std::vector<std::string> kVocab = {"a", "b", "c", "ab", "bc", "abc", " ", "<eot>"};

TokenizerId table_file(const TempDir& dir, const std::string& encoder,
                       std::vector<std::array<int32_t, 3>> merges = {{0, 1, 3}, {1, 2, 4}},
                       const std::string& name = "x_tokenizer.json") {
  std::vector<int64_t> offsets = {0};
  std::string bytes;
  for (const auto& t : kVocab) offsets.push_back(int64_t((bytes += t).size()));
  TokenFile f;
  f.values = {0, 1, 2};
  f.vocab_size = int64_t(kVocab.size());
  f.eos_id = 7;
  f.tokenizer = name;
  f.extra = [&](hid_t file, hid_t dset) {
    write_1d(file, "/token_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, offsets.data(),
             offsets.size());
    write_1d(file, "/token_bytes", H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), bytes.size());
    if (!encoder.empty()) test::write_string_attr(dset, "text_encoder", encoder, false);
    if (encoder == "gpt2-bpe-merges") write_2d_int32(file, "/token_merges", merges);
  };
  const std::string path = dir.file("t.h5");
  test::write_token_file(path, f);
  return {path, int64_t(kVocab.size()), name, "", encoder};
}

TEST(TextEncoder, MergesRuleAppliesOnlyListedMergesLowestRankFirst) {
  TempDir dir;
  const auto e = TextEncoder::open(table_file(dir, "gpt2-bpe-merges"), 7, nullptr);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->encode("abc"), (std::vector<int32_t>{3, 2}));  // (a, b) outranks (b, c)
  EXPECT_EQ(e->encode("bca"), (std::vector<int32_t>{4, 0}));
  EXPECT_EQ(e->encode("ab ab"), (std::vector<int32_t>{3, 6, 3}));  // pieces "ab", " ab"
  // (b, c) first: then nothing joins a and bc.
  const auto f =
      TextEncoder::open(table_file(dir, "gpt2-bpe-merges", {{1, 2, 4}, {0, 1, 3}}), 7, nullptr);
  EXPECT_EQ(f->encode("abc"), (std::vector<int32_t>{0, 4}));
}

TEST(TextEncoder, RanksRuleJoinsWhatTheVocabularySpellsLowestIdFirst) {
  TempDir dir;
  const auto e = TextEncoder::open(table_file(dir, "gpt2-bpe-ranks"), 7, nullptr);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->encode("abc"), (std::vector<int32_t>{5}));      // a token itself
  EXPECT_EQ(e->encode("abca"), (std::vector<int32_t>{5, 0}));  // ab (3), then abc (5)
  EXPECT_EQ(e->encode("cab"), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(e->encode("a bc"), (std::vector<int32_t>{0, 6, 4}));  // " bc" is no token
}

TEST(TextEncoder, ByteRuleIsTheUtf8Bytes) {
  TempDir dir;
  TokenFile f;
  f.values = {1, 2};
  f.tokenizer = "byte";
  const std::string path = dir.file("b.h5");
  test::write_token_file(path, f);
  // No text_encoder attribute: byte files from before it encode all the same.
  const auto e = TextEncoder::open({path, 256, "byte", "", ""}, std::nullopt, nullptr);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->encode("h\xC3\xA9"), (std::vector<int32_t>{'h', 0xC3, 0xA9}));
}

TEST(TextEncoder, FileThatDoesNotSayIsNoEncoderWithTheReason) {
  TempDir dir;
  std::string why;
  EXPECT_FALSE(TextEncoder::open(table_file(dir, ""), 7, &why));
  EXPECT_NE(why.find("t.h5"), std::string::npos) << why;
  EXPECT_NE(why.find("tools/prepare_data.py"), std::string::npos) << why;
}

TEST(TextEncoder, BadTablesAndTextAreOneErrorNamingThem) {
  TempDir dir;
  EXPECT_NE(error_of([&] {
              TextEncoder::open(table_file(dir, "sentencepiece"), 7, nullptr);
            }).find("unknown text_encoder 'sentencepiece'"),
            std::string::npos);
  // Row 1 says a + c is "bc".
  const std::string bad = error_of([&] {
    TextEncoder::open(table_file(dir, "gpt2-bpe-merges", {{0, 1, 3}, {0, 2, 4}}), 7, nullptr);
  });
  EXPECT_NE(bad.find("/token_merges row 1"), std::string::npos) << bad;
  EXPECT_NE(error_of([&] {
              TextEncoder::open(table_file(dir, "gpt2-bpe-merges", {{0, 1, 99}}), 7, nullptr);
            }).find("row 0"),
            std::string::npos);
  const auto e = TextEncoder::open(table_file(dir, "gpt2-bpe-merges"), 7, nullptr);
  EXPECT_NE(error_of([&] { e->encode("ab\xFF"); }).find("not valid UTF-8"), std::string::npos);
  EXPECT_NE(error_of([&] { e->encode("abd"); }).find("no token for byte 0x64"), std::string::npos);
}

}  // namespace
}  // namespace fsdp
