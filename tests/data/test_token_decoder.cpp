// TokenDecoder: ids back to text from the table prepare_data.py writes, the
// byte tokenizer without one, and damaged tables as one error naming the file.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

#include "common/error.h"
#include "data/token_decoder.h"
#include "tests/data/h5_test_file.h"

namespace fsdp {
namespace {

using test::TempDir;
using test::TokenFile;
using test::write_1d;

// Vocabulary of 4: "Hé" split across tokens 1 and 2 ("H\xC3", "\xA9"), an
// empty token 3, and token 0 "<eot>".
std::string table_file(const TempDir& dir, std::vector<int64_t> offsets, std::string bytes,
                       int64_t vocab = 4) {
  TokenFile f;
  f.values = {0, 1, 2, 3};
  f.vocab_size = vocab;
  f.tokenizer = "bpe:x_tokenizer.json";
  f.extra = [&](hid_t file, hid_t) {
    write_1d(file, "/token_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, offsets.data(),
             offsets.size());
    write_1d(file, "/token_bytes", H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes.data(), bytes.size());
  };
  const std::string path = dir.file("t.h5");
  test::write_token_file(path, f);
  return path;
}

TEST(TokenDecoder, TableDecodesAcrossTokenBoundaries) {
  TempDir dir;
  const std::string path = table_file(dir, {0, 5, 7, 8, 8}, "<eot>H\xC3\xA9");
  std::string why;
  auto d = TokenDecoder::open(path, 4, "bpe:x_tokenizer.json", &why);
  ASSERT_TRUE(d.has_value()) << why;
  EXPECT_EQ(d->vocab_size(), 4);
  EXPECT_EQ(d->decode({1, 2, 3, 0}), "H\xC3\xA9<eot>");
  // A sample that ends inside a character: the dangling byte becomes U+FFFD.
  EXPECT_EQ(d->decode({2, 1}), "\xEF\xBF\xBDH\xEF\xBF\xBD");
  EXPECT_EQ(d->decode({1, 99, -1, 2}), "H\xC3\xA9")
      << "ids outside the vocabulary decode to nothing";
}

TEST(TokenDecoder, ByteTokenizerNeedsNoTable) {
  TempDir dir;
  TokenFile f;
  f.values = {104, 105};
  f.tokenizer = "byte";
  test::write_token_file(dir.file("b.h5"), f);
  auto d = TokenDecoder::open(dir.file("b.h5"), 256, "byte", nullptr);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->decode({104, 105, 10}), "hi\n");
  // Another tokenizer without a table: no decoder, and the reason names the file.
  test::write_token_file(dir.file("n.h5"), TokenFile{});
  std::string why;
  EXPECT_FALSE(TokenDecoder::open(dir.file("n.h5"), 256, "bpe:t.json", &why).has_value());
  EXPECT_NE(why.find("n.h5"), std::string::npos) << why;
  EXPECT_NE(why.find("prepare_data.py"), std::string::npos) << why;
}

TEST(TokenDecoder, DamagedTablesAreOneErrorNamingTheFile) {
  struct Case {
    std::vector<int64_t> offsets;
    std::string bytes;
    const char* needle;
  };
  for (const Case& c : {Case{{0, 5, 7, 8}, "<eot>H\xC3\xA9", "entries for vocab_size 4"},
                        Case{{0, 5, 9, 8, 8}, "<eot>H\xC3\xA9", "decreases at token 2"},
                        Case{{0, 5, 7, 8, 9}, "<eot>H\xC3\xA9", "from 0 to the 8 bytes"},
                        Case{{1, 5, 7, 8, 8}, "<eot>H\xC3\xA9", "from 0"}}) {
    TempDir dir;
    const std::string path = table_file(dir, c.offsets, c.bytes);
    try {
      TokenDecoder::open(path, 4, "bpe", nullptr);
      ADD_FAILURE() << "accepted a damaged table: " << c.needle;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.needle), std::string::npos) << m;
      EXPECT_NE(m.find(path), std::string::npos) << m;
    }
  }
}

TEST(ValidUtf8, KeepsGoodSequencesAndReplacesEveryBadByte) {
  EXPECT_EQ(valid_utf8("plain \xE2\x82\xAC \xF0\x9F\x99\x82"),
            "plain \xE2\x82\xAC \xF0\x9F\x99\x82");
  EXPECT_EQ(valid_utf8("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");                  // overlong
  EXPECT_EQ(valid_utf8("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
  EXPECT_EQ(valid_utf8("a\xFF"), "a\xEF\xBF\xBD");
}

}  // namespace
}  // namespace fsdp
