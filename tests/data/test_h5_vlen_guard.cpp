// data/h5_vlen_guard: a token file whose variable-length string attribute
// has a damaged heap reference is one error line, not a crash inside
// HDF5's H5Aread; sound files of every layout the guard walks (version 1
// and 2 object headers, attributes on the root) and one it does not
// (dense attribute storage) read as before.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/hdf5_lock.h"
#include "data/h5_vlen_guard.h"
#include "data/token_dataset.h"
#include "h5_test_file.h"

namespace fsdp {
namespace {

using test::TempDir;
using test::TokenFile;

const std::string kTokenizer = "{\"model\": \"a tokenizer's JSON, a heap object of its own\"}";

std::vector<uint8_t> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void spill(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

uint64_t at_le(const std::vector<uint8_t>& b, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | b[at + size_t(i)];
  return v;
}

void put_le(std::vector<uint8_t>& b, size_t at, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
}

// Where the file stores the tokenizer's reference (length 4 bytes, the
// collection's address 8, the object's index 4), found from the bytes alone:
// the file has one global heap ("GCOL") and one string of kTokenizer's length.
struct Reference {
  size_t at = 0;       // of the 16 bytes
  size_t heap = 0;     // of "GCOL"
  uint64_t index = 0;  // the object's
};

Reference find_reference(const std::vector<uint8_t>& b) {
  Reference r;
  const std::string gcol = "GCOL";
  r.heap = size_t(std::search(b.begin(), b.end(), gcol.begin(), gcol.end()) - b.begin());
  std::vector<uint8_t> want(12);
  put_le(want, 0, kTokenizer.size(), 4);
  put_le(want, 4, r.heap, 8);
  r.at = size_t(std::search(b.begin(), b.end(), want.begin(), want.end()) - b.begin());
  if (r.heap < b.size() && r.at < b.size()) r.index = at_le(b, r.at + 12, 4);
  return r;
}

// A sound token file with a variable-length tokenizer string, as
// tools/prepare_data.py (h5py) writes one.
std::string sound_file(const TempDir& dir) {
  const std::string path = dir.file("sound.h5");
  TokenFile f;
  f.values = test::iota_tokens(1000, 256);
  f.tokenizer = kTokenizer;
  test::write_token_file(path, f);
  return path;
}

std::string open_error(const std::string& path) {
  try {
    const TokenDataset ds = TokenDataset::open(DataSource{path}, "--train-data");
    EXPECT_EQ(ds.tokenizer(), kTokenizer);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// One line naming the flag, the attribute and the file, and what is wrong.
void expect_damage(const std::string& path, const char* what) {
  const std::string msg = open_error(path);
  ASSERT_FALSE(msg.empty()) << "no error for " << what;
  EXPECT_EQ(
      msg.rfind("--train-data: attribute tokenizer of /tokens in '" + path + "' is damaged", 0), 0u)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST(H5VlenGuard, SoundFileReads) {
  TempDir dir;
  const std::string path = sound_file(dir);
  const Reference r = find_reference(slurp(path));
  ASSERT_LT(r.at, slurp(path).size()) << "the test cannot find the reference";
  EXPECT_EQ(open_error(path), "");
}

// A sound file's bytes and where its reference lies, for a case to damage.
class H5VlenGuardDamage : public ::testing::Test {
 protected:
  void SetUp() override {
    bytes = slurp(sound_file(dir));
    r = find_reference(bytes);
    ASSERT_LT(r.at, bytes.size()) << "the test cannot find the reference";
  }
  // The bytes as they are now, written to `name`.
  std::string write(const char* name) {
    const std::string path = dir.file(name);
    spill(path, bytes);
    return path;
  }

  TempDir dir;
  std::vector<uint8_t> bytes;
  Reference r;
};

// The fuzz test's crash: one flipped byte in the index (2 -> 0x94000002).
TEST_F(H5VlenGuardDamage, IndexPastTheHeapsObjects) {
  for (uint64_t index : {r.index | 0x94000000u, r.index + 1, uint64_t(0)}) {
    put_le(bytes, r.at + 12, index, 4);
    expect_damage(write("index.h5"), ("names object " + std::to_string(index)).c_str());
  }
}

TEST_F(H5VlenGuardDamage, LengthOtherThanTheObjects) {
  put_le(bytes, r.at, kTokenizer.size() + 100, 4);  // H5Aread would copy the object past its buffer
  expect_damage(write("length.h5"), "string's length");
}

TEST_F(H5VlenGuardDamage, AddressOfNoHeap) {
  for (uint64_t addr : {uint64_t(r.heap + 8), uint64_t(bytes.size() + 4096), ~uint64_t(0) - 4}) {
    put_le(bytes, r.at + 4, addr, 8);
    const std::string msg = open_error(write("address.h5"));
    EXPECT_NE(msg.find("is damaged"), std::string::npos) << addr << ": " << msg;
  }
}

// An object of the heap whose size runs past the collection: HDF5 would
// read past its buffer for it, or lose the objects after it.
TEST_F(H5VlenGuardDamage, HeapObjectRunningPastTheCollection) {
  put_le(bytes, r.heap + 16 + 8, uint64_t(1) << 40, 8);  // the first object's size
  expect_damage(write("object.h5"), "runs past its end");
}

// A new file in HDF5's latest format (version 2 object headers).
hid_t create_latest_format(const std::string& path) {
  const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  H5Pclose(fapl);
  return file;
}

// Layouts the guard walks besides h5py's: version 2 object headers (HDF5's
// latest format; the root group's, holding the attributes).
TEST(H5VlenGuard, Version2ObjectHeadersRead) {
  TempDir dir;
  const std::string path = dir.file("v2.h5");
  {
    Hdf5Lock lock;
    const hid_t file = create_latest_format(path);
    const std::vector<uint16_t> tokens(1000, 7);
    test::write_1d(file, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, tokens.data(), tokens.size());
    test::write_int_attr(file, "vocab_size", 256);
    test::write_string_attr(file, "tokenizer", kTokenizer, true);
    H5Fclose(file);
  }
  std::vector<uint8_t> b = slurp(path);
  ASSERT_NE(std::string(b.begin(), b.end()).find("OHDR"), std::string::npos);
  EXPECT_EQ(open_error(path), "");
  const Reference r = find_reference(b);
  ASSERT_LT(r.at, b.size());
  // The guard found the attribute in the version 2 header: the heap (no
  // checksum) damaged under it is named.
  std::vector<uint8_t> heap = b;
  put_le(heap, r.heap + 16 + 8, uint64_t(1) << 40, 8);
  spill(path, heap);
  EXPECT_NE(open_error(path).find("is damaged (object"), std::string::npos) << open_error(path);
  // Version 2 headers carry a checksum, which HDF5 checks as it opens the
  // object: a damaged reference there is an error before the guard runs.
  put_le(b, r.at + 12, r.index + 7, 4);
  spill(path, b);
  const std::string msg = open_error(path);
  EXPECT_EQ(msg.rfind("--train-data: ", 0), 0u) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

// Dense attribute storage (a fractal heap the guard does not follow): the
// guard says nothing and HDF5 reads the sound string.
TEST(H5VlenGuard, DenseAttributesAreLeftToHdf5) {
  TempDir dir;
  const std::string path = dir.file("dense.h5");
  {
    Hdf5Lock lock;
    const hid_t file = create_latest_format(path);
    const hsize_t n = 1000;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_attr_phase_change(dcpl, 0, 0);  // every attribute dense
    const hid_t dset =
        H5Dcreate2(file, "tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    const std::vector<uint16_t> tokens(n, 7);
    H5Dwrite(dset, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, tokens.data());
    test::write_int_attr(dset, "vocab_size", 256);
    test::write_string_attr(dset, "tokenizer", kTokenizer, true);
    H5Dclose(dset);
    H5Pclose(dcpl);
    H5Sclose(space);
    H5Fclose(file);
    const hid_t again = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    const hid_t reopened = H5Dopen2(again, "tokens", H5P_DEFAULT);
    EXPECT_EQ(vlen_attr_damage(again, reopened, "tokenizer"), "");
    H5Dclose(reopened);
    H5Fclose(again);
  }
  EXPECT_EQ(open_error(path), "");
}

// H5Aread writes every element of an attribute: an array of strings into
// the one string the reader holds would overflow it.
TEST(H5VlenGuard, StringArrayIsRefused) {
  TempDir dir;
  const std::string path = dir.file("array.h5");
  TokenFile f;
  f.values = test::iota_tokens(1000, 256);
  f.extra = [](hid_t, hid_t dset) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hsize_t n = 3;
    const hid_t space = H5Screate_simple(1, &n, nullptr);
    const hid_t attr = H5Acreate2(dset, "tokenizer", type, space, H5P_DEFAULT, H5P_DEFAULT);
    const char* values[3] = {"a", "b", "c"};
    H5Awrite(attr, type, values);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
  };
  test::write_token_file(path, f);
  const std::string msg = open_error(path);
  EXPECT_NE(msg.find("must be a single string, not an array"), std::string::npos) << msg;
}

}  // namespace
}  // namespace fsdp
