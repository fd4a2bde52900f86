#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "data/token_dataset.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

using test::TempDir;
using test::TokenFile;
using test::write_token_file;

// The message of the fsdp::Error that opening `path` throws ("" if none).
std::string open_error(const std::string& path, const std::string& dataset = "/tokens") {
  try {
    TokenDataset::open(DataSource{path, dataset}, "--train-data");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

// Every open error is one line starting with the flag and naming the file.
void expect_error(const std::string& msg, const std::string& path,
                  std::initializer_list<const char*> details) {
  ASSERT_FALSE(msg.empty()) << "no error for " << path;
  EXPECT_EQ(msg.rfind("--train-data: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_HAS(msg, path);
  for (const char* d : details) EXPECT_HAS(msg, d);
}

TEST(DataSource, Parse) {
  const auto plain = DataSource::parse("dir/train.h5");
  EXPECT_EQ(plain.file, "dir/train.h5");
  EXPECT_EQ(plain.dataset, "/tokens");
  const auto named = DataSource::parse("dir/all.h5:/val/tokens");
  EXPECT_EQ(named.file, "dir/all.h5");
  EXPECT_EQ(named.dataset, "/val/tokens");
  const auto colon = DataSource::parse("odd:name.h5");
  EXPECT_EQ(colon.file, "odd:name.h5");
  EXPECT_EQ(colon.dataset, "/tokens");
  EXPECT_THROW(DataSource::parse("", "--val-data"), Error);
}

TEST(TokenDataset, ReadsUint16ExactValues) {
  TempDir dir;
  const auto path = dir.file("u16.h5");
  TokenFile f;
  f.values = test::iota_tokens(10000, 251);
  f.eos_id = 250;
  f.tokenizer = "byte";
  write_token_file(path, f);

  const auto ds = TokenDataset::open(DataSource::parse(path), "--train-data");
  EXPECT_EQ(ds.size(), 10000);
  EXPECT_EQ(ds.vocab_size(), 256);
  EXPECT_EQ(ds.eos_id(), 250);
  EXPECT_EQ(ds.tokenizer(), "byte");
  EXPECT_EQ(ds.bytes_per_token(), 2);
  std::vector<int32_t> out(100);
  for (int64_t offset : {0, 1, 4090, 4096 - 50, 9900}) {
    ds.read(offset, 100, out.data());
    for (int i = 0; i < 100; ++i) ASSERT_EQ(out[i], (offset + i) % 251) << offset << "+" << i;
  }
  ds.read(9999, 1, out.data());
  EXPECT_EQ(out[0], 9999 % 251);
  ds.read(5, 0, out.data());  // empty reads are allowed
}

TEST(TokenDataset, ReadsUint32AndBigEndian) {
  TempDir dir;
  for (hid_t type : {H5T_STD_U32LE, H5T_STD_U32BE, H5T_STD_U16BE}) {
    const auto path = dir.file("t.h5");
    const bool wide = H5Tget_size(type) == 4;
    TokenFile f;
    f.type = type;
    f.vocab_size = wide ? 100000 : 65536;
    f.values = test::iota_tokens(5000, 1);
    for (size_t i = 0; i < f.values.size(); ++i)
      f.values[i] = static_cast<int64_t>((i * 7919) % static_cast<size_t>(*f.vocab_size));
    f.chunked = false;
    write_token_file(path, f);

    const auto ds = TokenDataset::open(DataSource{path}, "--val-data");
    EXPECT_EQ(ds.bytes_per_token(), wide ? 4 : 2);
    EXPECT_FALSE(ds.eos_id().has_value());
    EXPECT_EQ(ds.tokenizer(), "");
    std::vector<int32_t> out(5000);
    ds.read(0, 5000, out.data());
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], f.values[i]) << i;
  }
}

TEST(TokenDataset, NamedDatasetAndRootAttributes) {
  TempDir dir;
  const auto path = dir.file("nested.h5");
  TokenFile f;
  f.dataset = "/splits/val";
  f.values = {1, 2, 3};
  f.attrs_on_root = true;
  f.vocab_size = 4;
  f.extra = [](hid_t, hid_t dset) { test::write_string_attr(dset, "tokenizer", "gpt2", false); };
  write_token_file(path, f);
  const auto ds = TokenDataset::open(DataSource::parse(path + ":/splits/val"), "--val-data");
  EXPECT_EQ(ds.vocab_size(), 4);
  EXPECT_EQ(ds.tokenizer(), "gpt2");  // fixed-length string
  EXPECT_EQ(ds.source().dataset, "/splits/val");
}

TEST(TokenDataset, MoveKeepsTheOpenFile) {
  TempDir dir;
  const auto path = dir.file("m.h5");
  TokenFile f;
  f.values = {5, 6, 7};
  write_token_file(path, f);
  auto a = TokenDataset::open(DataSource{path}, "--train-data");
  TokenDataset b = std::move(a);
  auto c = TokenDataset::open(DataSource{path}, "--train-data");
  c = std::move(b);
  int32_t out[3];
  c.read(0, 3, out);
  EXPECT_EQ(out[2], 7);
  EXPECT_THROW(c.read(1, 3, out), Error);  // past the end is a programming error
}

TEST(TokenDatasetErrors, MissingFile) {
  TempDir dir;
  const auto path = dir.file("absent.h5");
  expect_error(open_error(path), path, {"cannot open", "no such file"});
}

TEST(TokenDatasetErrors, Directory) {
  TempDir dir;
  expect_error(open_error(dir.path().string()), dir.path().string(), {"directory"});
}

TEST(TokenDatasetErrors, NotHdf5) {
  TempDir dir;
  const auto path = dir.file("text.h5");
  std::ofstream(path) << "just some text, not HDF5\n";
  expect_error(open_error(path), path, {"not an HDF5 file", "prepare_data.py"});
  const auto empty = dir.file("empty.h5");
  std::ofstream{empty};
  expect_error(open_error(empty), empty, {"not an HDF5 file"});
}

TEST(TokenDatasetErrors, TruncatedFile) {
  TempDir dir;
  const auto path = dir.file("cut.h5");
  TokenFile f;
  f.values = test::iota_tokens(200000, 256);
  f.chunked = false;
  write_token_file(path, f);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  expect_error(open_error(path), path, {"truncated"});
}

TEST(TokenDatasetErrors, MissingDatasetListsWhatIsThere) {
  TempDir dir;
  const auto path = dir.file("f.h5");
  TokenFile f;
  f.dataset = "/train";
  f.values = {1, 2};
  f.extra = [](hid_t file, hid_t) {
    H5Gclose(H5Gcreate2(file, "/grp", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  };
  write_token_file(path, f);
  const auto msg = open_error(path);
  expect_error(msg, path, {"has no dataset /tokens", "datasets at /: /train", "FILE:/DATASET"});
  EXPECT_EQ(msg.find("grp"), std::string::npos) << msg;  // groups are not listed
  expect_error(open_error(path, "/a/b/c"), path, {"has no dataset /a/b/c"});
  expect_error(open_error(path, "/train/x"), path, {"has no dataset /train/x"});
  expect_error(open_error(path, "/grp"), path, {"/grp", "is a group, not a dataset"});
}

TEST(TokenDatasetErrors, NotOneDimensional) {
  TempDir dir;
  const auto path = dir.file("2d.h5");
  TokenFile f;
  f.values = test::iota_tokens(12, 10);
  f.dims = {3, 4};
  write_token_file(path, f);
  expect_error(open_error(path), path, {"/tokens", "2-D [3 x 4]", "1-D"});
}

TEST(TokenDatasetErrors, WrongElementType) {
  TempDir dir;
  const std::pair<hid_t, const char*> cases[] = {{H5T_STD_I32LE, "int32"},
                                                 {H5T_STD_I16LE, "int16"},
                                                 {H5T_STD_U8LE, "uint8"},
                                                 {H5T_STD_U64LE, "uint64"},
                                                 {H5T_IEEE_F32LE, "float32"}};
  for (const auto& [type, name] : cases) {
    const auto path = dir.file(std::string(name) + ".h5");
    TokenFile f;
    f.type = type;
    f.values = {1, 2, 3};
    write_token_file(path, f);
    expect_error(open_error(path), path, {"/tokens", name, "uint16 or uint32"});
  }
}

TEST(TokenDatasetErrors, EmptyDataset) {
  TempDir dir;
  const auto path = dir.file("empty.h5");
  TokenFile f;
  f.chunked = false;
  write_token_file(path, f);
  expect_error(open_error(path), path, {"/tokens", "has no tokens"});
}

TEST(TokenDatasetErrors, VocabSizeMissingOrInvalid) {
  TempDir dir;
  const auto path = dir.file("v.h5");
  TokenFile f;
  f.values = {1, 2, 3};
  f.vocab_size.reset();
  write_token_file(path, f);
  expect_error(open_error(path), path, {"no vocab_size attribute"});

  f.extra = [](hid_t, hid_t d) { test::write_float_attr(d, "vocab_size", 256.0); };
  write_token_file(path, f);
  expect_error(open_error(path), path, {"vocab_size", "float64", "must be an integer"});

  f.extra = [](hid_t, hid_t d) { test::write_string_attr(d, "vocab_size", "256", true); };
  write_token_file(path, f);
  expect_error(open_error(path), path, {"vocab_size", "string"});

  f.extra = [](hid_t, hid_t d) { test::write_int_array_attr(d, "vocab_size", {256, 512}); };
  write_token_file(path, f);
  expect_error(open_error(path), path, {"vocab_size", "single integer"});

  f.extra = nullptr;
  for (int64_t bad : {int64_t{0}, int64_t{-5}, int64_t{1} << 40}) {
    f.vocab_size = bad;
    write_token_file(path, f);
    expect_error(open_error(path), path, {"vocab_size", std::to_string(bad).c_str()});
  }
}

TEST(TokenDatasetErrors, EosIdOutOfRange) {
  TempDir dir;
  const auto path = dir.file("eos.h5");
  TokenFile f;
  f.values = {1, 2, 3};
  f.eos_id = 256;
  write_token_file(path, f);
  expect_error(open_error(path), path, {"eos_id 256", "vocab_size 256"});
}

TEST(TokenDatasetErrors, TokenOutOfVocabulary) {
  TempDir dir;
  const auto path = dir.file("bad.h5");
  TokenFile f;
  f.values = test::iota_tokens(20000, 256);
  f.values[12345] = 300;
  f.values[15000] = 999;  // only the first is reported
  write_token_file(path, f);
  expect_error(open_error(path), path,
               {"token 300 at offset 12345 of /tokens in '", "is >= vocab_size 256"});
}

TEST(TokenDatasetErrors, TokenOutOfVocabularyBeyondFirstScanChunk) {
  // The scan reads 4M tokens at a time; the bad token sits in the second chunk.
  TempDir dir;
  const auto path = dir.file("big.h5");
  TokenFile f;
  f.type = H5T_STD_U32LE;
  f.values.assign(5'000'000, 7);
  f.values[4'500'001] = 1000;
  f.vocab_size = 1000;
  write_token_file(path, f);
  expect_error(open_error(path), path, {"token 1000 at offset 4500001", ">= vocab_size 1000"});
}

TEST(TokenDatasetErrors, RequireMinTokens) {
  TempDir dir;
  const auto path = dir.file("short.h5");
  TokenFile f;
  f.values = {1, 2, 3, 4, 5};
  write_token_file(path, f);
  const auto ds = TokenDataset::open(DataSource{path}, "--val-data");
  EXPECT_NO_THROW(ds.require_min_tokens(5, "x"));
  try {
    ds.require_min_tokens(9, "one sequence of --seq-len 8");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("--val-data: ", 0), 0u) << msg;
    EXPECT_HAS(msg, path);
    EXPECT_HAS(msg, "has 5 tokens");
    EXPECT_HAS(msg, "one sequence of --seq-len 8 needs at least 9");
  }
}

}  // namespace
}  // namespace fsdp
