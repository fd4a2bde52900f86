// same_tokenizer: content decides, not the per-prefix names prepare_data.py
// gives a tokenizer's copy (issue 31, papercut 1).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <string>
#include <vector>

#include "data/token_dataset.h"
#include "data/tokenizer_match.h"
#include "tests/data/h5_test_file.h"

namespace fsdp {
namespace {

using test::TempDir;
using test::TokenFile;

// A token file of vocabulary 3 whose decode table spells `a`, `b`, `c`;
// `sha` (if not empty) as its tokenizer_sha256 attribute.
std::string file_with(const TempDir& dir, const std::string& name, const std::string& tokenizer,
                      const std::string& abc, const std::string& sha = "") {
  TokenFile f;
  f.values = {0, 1, 2, 1};
  f.vocab_size = 3;
  f.tokenizer = tokenizer;
  f.extra = [&](hid_t file, hid_t dset) {
    const std::vector<int64_t> offsets = {0, 1, 2, int64_t(abc.size())};
    hsize_t n = offsets.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t d = H5Dcreate2(file, "/token_offsets", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                         H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, offsets.data());
    H5Dclose(d);
    H5Sclose(space);
    n = abc.size();
    space = H5Screate_simple(1, &n, nullptr);
    d = H5Dcreate2(file, "/token_bytes", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT,
                   H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, abc.data());
    H5Dclose(d);
    H5Sclose(space);
    if (!sha.empty()) test::write_string_attr(dset, "tokenizer_sha256", sha, false);
  };
  const std::string path = dir.file(name);
  test::write_token_file(path, f);
  return path;
}

TokenizerId id_of(const std::string& path) {
  return TokenDataset::open(DataSource::parse(path), "--train-data").tokenizer_id();
}

TEST(TokenizerMatch, SameTableUnderTwoNamesIsTheSameTokenizer) {
  TempDir dir;
  const auto a = id_of(file_with(dir, "a.h5", "a_tokenizer.json", "xyz"));
  const auto b = id_of(file_with(dir, "b.h5", "b_tokenizer.json", "xyz"));
  EXPECT_TRUE(same_tokenizer(a, b));
}

TEST(TokenizerMatch, DifferentTablesUnderTwoNamesDiffer) {
  TempDir dir;
  const auto a = id_of(file_with(dir, "a.h5", "a_tokenizer.json", "xyz"));
  const auto b = id_of(file_with(dir, "b.h5", "b_tokenizer.json", "xyw"));
  EXPECT_FALSE(same_tokenizer(a, b));
}

TEST(TokenizerMatch, TheHashDecidesOverNames) {
  TempDir dir;
  // One name, two contents: two BPEs trained under the same prefix in two folders.
  const auto a = id_of(file_with(dir, "a.h5", "owt_tokenizer.json", "xyz", "11aa"));
  const auto b = id_of(file_with(dir, "b.h5", "owt_tokenizer.json", "xyz", "22bb"));
  EXPECT_EQ(a.sha256, "11aa");
  EXPECT_FALSE(same_tokenizer(a, b));
  const auto c = id_of(file_with(dir, "c.h5", "web_tokenizer.json", "xyz", "11aa"));
  EXPECT_TRUE(same_tokenizer(a, c));
}

TEST(TokenizerMatch, FilesWithoutTablesCompareNames) {
  TempDir dir;
  TokenFile f;
  f.values = {0, 1, 2};
  f.tokenizer = "gpt2";
  test::write_token_file(dir.file("g.h5"), f);
  f.tokenizer = "llama";
  test::write_token_file(dir.file("l.h5"), f);
  f.tokenizer.reset();
  test::write_token_file(dir.file("n.h5"), f);
  EXPECT_FALSE(same_tokenizer(id_of(dir.file("g.h5")), id_of(dir.file("l.h5"))));
  EXPECT_TRUE(same_tokenizer(id_of(dir.file("g.h5")), id_of(dir.file("g.h5"))));
  EXPECT_TRUE(same_tokenizer(id_of(dir.file("g.h5")), id_of(dir.file("n.h5"))))
      << "a file that names no tokenizer is not evidence of another";
}

}  // namespace
}  // namespace fsdp
