// tools/prepare_data.py end to end: whatever it writes must open with
// TokenDataset and hold exactly the input's tokens.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "data/token_dataset.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

Result run_shell(const std::string& cmd) {
  Result r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.output.append(buf, n);
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return r;
}

class PrepareData : public ::testing::Test {
 protected:
  // Python starts slowly (~0.5 s with numpy and h5py), so probe it once.
  static void SetUpTestSuite() {
    python_ = env("FSDP_PYTHON");
    script_ = env("FSDP_PREPARE_DATA");
    has_modules_ =
        !python_.empty() && run_shell(quote(python_) + " -c 'import numpy, h5py'").status == 0;
  }

  void SetUp() override {
    ASSERT_FALSE(python_.empty() || script_.empty())
        << "run through CTest, which sets FSDP_PYTHON and FSDP_PREPARE_DATA";
    if (!has_modules_)
      GTEST_SKIP() << python_ << " lacks numpy or h5py (tools/setup.sh installs them)";
  }

  Result prepare(const std::string& args) {
    return run_shell(quote(python_) + " " + quote(script_) + " " + args);
  }

  // Every token of PREFIX_train.h5 followed by PREFIX_val.h5 (if present).
  std::vector<int32_t> tokens(const std::string& prefix, int64_t* val_size = nullptr) {
    std::vector<int32_t> all;
    for (const char* split : {"_train.h5", "_val.h5"}) {
      if (!std::filesystem::exists(prefix + split)) continue;
      const auto ds = TokenDataset::open(DataSource{prefix + split}, "--data");
      std::vector<int32_t> part(static_cast<size_t>(ds.size()));
      ds.read(0, ds.size(), part.data());
      all.insert(all.end(), part.begin(), part.end());
      if (val_size && std::string(split) == "_val.h5") *val_size = ds.size();
    }
    return all;
  }

  static inline std::string python_, script_;
  static inline bool has_modules_ = false;
  test::TempDir dir_;
};

void write_bytes(const std::string& path, const void* data, size_t size) {
  std::ofstream(path, std::ios::binary).write(static_cast<const char*>(data), size);
}

// A version 1.0 .npy file: magic, header length, a Python dict literal padded
// so the data starts on a 64-byte boundary.
void write_npy(const std::string& path, const std::string& descr,
               const std::vector<uint32_t>& values) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                       std::to_string(values.size()) + ",), }";
  while ((10 + header.size() + 1) % 64) header += ' ';
  header += '\n';
  std::string bytes = "\x93NUMPY\x01";
  bytes += '\0';
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  for (uint32_t v : values) {
    const int width = descr == "<u2" ? 2 : 4;
    for (int b = 0; b < width; ++b) bytes += static_cast<char>((v >> (8 * b)) & 0xff);
  }
  write_bytes(path, bytes.data(), bytes.size());
}

TEST_F(PrepareData, ByteLevelTextKeepsEveryByte) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "Line " + std::to_string(i) + ": h\xc3\xa9llo w\xc3\xb6rld\n";
  const auto in = dir_.file("in.txt");
  write_bytes(in, text.data(), text.size());
  const auto prefix = dir_.file("byte");
  const auto r = prepare("text " + quote(in) + " --out " + quote(prefix) + " --val-fraction 0.1");
  ASSERT_EQ(r.status, 0) << r.output;

  int64_t val_size = 0;
  const auto got = tokens(prefix, &val_size);
  ASSERT_EQ(got.size(), text.size());
  for (size_t i = 0; i < text.size(); ++i)
    ASSERT_EQ(got[i], static_cast<unsigned char>(text[i])) << i;
  EXPECT_EQ(val_size, static_cast<int64_t>(text.size() / 10 + (text.size() % 10 >= 5)));
  const auto train = TokenDataset::open(DataSource{prefix + "_train.h5"}, "--train-data");
  EXPECT_EQ(train.vocab_size(), 256);
  EXPECT_EQ(train.bytes_per_token(), 2);
  EXPECT_EQ(train.tokenizer(), "byte");
  EXPECT_FALSE(train.eos_id().has_value());
}

TEST_F(PrepareData, BpeTextSavesItsTokenizer) {
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i % 17) + "\n";
  const auto in = dir_.file("in.txt");
  write_bytes(in, text.data(), text.size());
  const auto prefix = dir_.file("bpe");
  const auto r = prepare("text " + quote(in) + " --out " + quote(prefix) +
                         " --tokenizer bpe --vocab-size 320 --val-fraction 0.2");
  if (r.output.find("No module named 'tokenizers'") != std::string::npos)
    GTEST_SKIP() << "python package tokenizers missing";
  ASSERT_EQ(r.status, 0) << r.output;
  const auto train = TokenDataset::open(DataSource{prefix + "_train.h5"}, "--train-data");
  const auto val = TokenDataset::open(DataSource{prefix + "_val.h5"}, "--val-data");
  EXPECT_GT(train.vocab_size(), 257);
  EXPECT_LE(train.vocab_size(), 320);
  EXPECT_EQ(val.vocab_size(), train.vocab_size());
  ASSERT_TRUE(train.eos_id().has_value());
  EXPECT_EQ(train.tokenizer(), "bpe_tokenizer.json");
  EXPECT_TRUE(std::filesystem::exists(prefix + "_tokenizer.json"));
  EXPECT_LT(train.size() + val.size(), static_cast<int64_t>(text.size()) / 2);  // it merged
  // The one document ends with the end-of-text token, which lands in val.
  int32_t last = -1;
  val.read(val.size() - 1, 1, &last);
  EXPECT_EQ(last, *train.eos_id());
}

TEST_F(PrepareData, NpyArrays) {
  std::vector<uint32_t> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint32_t>(i * 97 % 70000);
  const auto npy = dir_.file("a.npy");
  write_npy(npy, "<u4", values);
  const auto prefix = dir_.file("npy");
  const auto r = prepare("import npy " + quote(npy) + " --out " + quote(prefix) +
                         " --vocab-size 70000 --eos-id 3 --tokenizer-name test");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(tokens(prefix), std::vector<int32_t>(values.begin(), values.end()));
  const auto train = TokenDataset::open(DataSource{prefix + "_train.h5"}, "--train-data");
  EXPECT_EQ(train.bytes_per_token(), 4);  // vocab > 65536 needs uint32
  EXPECT_EQ(train.vocab_size(), 70000);
  EXPECT_EQ(train.eos_id(), 3);
  EXPECT_EQ(train.tokenizer(), "test");
}

TEST_F(PrepareData, BinArraysWithAndWithoutLlmcHeader) {
  std::vector<uint16_t> values(600);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<uint16_t>(i * 31 % 50257);
  const std::vector<int32_t> expected(values.begin(), values.end());

  const auto raw = dir_.file("raw.bin");
  write_bytes(raw, values.data(), values.size() * 2);
  auto r = prepare("import raw " + quote(raw) + " --out " + quote(dir_.file("raw")) +
                   " --vocab-size 50257 --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_.file("raw_val.h5")));
  EXPECT_EQ(tokens(dir_.file("raw")), expected);

  std::vector<int32_t> header(256, 0);
  header[0] = 20240520;
  header[1] = 1;
  header[2] = static_cast<int32_t>(values.size());
  std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
  bytes.append(reinterpret_cast<const char*>(values.data()), values.size() * 2);
  const auto llmc = dir_.file("llmc.bin");
  write_bytes(llmc, bytes.data(), bytes.size());
  r = prepare("import llmc " + quote(llmc) + " --out " + quote(dir_.file("llmc")) +
              " --vocab-size 50257");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(tokens(dir_.file("llmc")), expected);

  // A header that promises more tokens than the file holds.
  write_bytes(llmc, bytes.data(), bytes.size() - 2);
  // (array, the older form, guesses llm.c's format from the header)
  r = prepare("array " + quote(llmc) + " --out " + quote(dir_.file("cut")) + " --vocab-size 50257");
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.output.find("truncated"), std::string::npos) << r.output;
}

// Megatron's indexed dataset by its layout (tools/prep/token_files.py): two
// documents, the first of two sequences, neither ending in end-of-text (id 9).
TEST_F(PrepareData, MegatronDocumentsGetTheirEndOfText) {
  const std::vector<uint16_t> values = {1, 2, 3, 4, 5, 6, 7};
  const std::vector<int32_t> lengths = {2, 3, 2};
  const std::vector<int64_t> pointers = {0, 4, 10}, doc_index = {0, 2, 3};
  std::string idx = std::string("MMIDIDX\0\0", 9);
  const auto put = [&idx](const void* p, size_t n) { idx.append(static_cast<const char*>(p), n); };
  const uint64_t version = 1, sequences = 3, documents = 3;
  const uint8_t uint16_code = 8;
  put(&version, 8), put(&uint16_code, 1), put(&sequences, 8), put(&documents, 8);
  put(lengths.data(), 12), put(pointers.data(), 24), put(doc_index.data(), 24);
  write_bytes(dir_.file("m_text_document.idx"), idx.data(), idx.size());
  write_bytes(dir_.file("m_text_document.bin"), values.data(), values.size() * 2);
  const auto r = prepare("import megatron " + quote(dir_.file("m_text_document")) + " --out " +
                         quote(dir_.file("meg")) + " --vocab-size 10 --eos-id 9 --append-eos" +
                         " --val-fraction 0");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(tokens(dir_.file("meg")), (std::vector<int32_t>{1, 2, 3, 4, 5, 9, 6, 7, 9}));
  const auto train = TokenDataset::open(DataSource{dir_.file("meg_train.h5")}, "--train-data");
  EXPECT_EQ(train.eos_id(), 9);
  EXPECT_EQ(train.vocab_size(), 10);
}

TEST_F(PrepareData, BadInputIsOneLineAndExitTwo) {
  const auto expect_fails = [&](const std::string& args, const std::string& detail) {
    const auto r = prepare(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("prepare_data: error: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find(detail), std::string::npos) << r.output;
  };
  const auto out = " --out " + quote(dir_.file("x"));
  expect_fails("text " + quote(dir_.file("absent.txt")) + out, "absent.txt");

  const auto npy = dir_.file("big.npy");
  write_npy(npy, "<u2", {1, 2, 3, 300, 4, 5});
  expect_fails("import npy " + quote(npy) + out + " --vocab-size 256", "token 300 at offset 3");
  // --out's directory is made (issue 65), unless it cannot be: under a file
  expect_fails("array " + quote(npy) + " --out " + quote(npy + "/x") + " --vocab-size 1000",
               "cannot make the directory");
  expect_fails("import npy " + quote(npy) + out, "--vocab-size");

  const auto tiny = dir_.file("tiny.txt");
  write_bytes(tiny, "abc", 3);
  expect_fails("text " + quote(tiny) + out, "validation split");
}

}  // namespace
}  // namespace fsdp
