// Writes small, real HDF5 token files (good and deliberately broken) for the
// data tests, through the HDF5 C API the reader uses.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fsdp::test {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

struct TokenFile {
  std::string dataset = "/tokens";
  hid_t type = H5T_STD_U16LE;  // the file's element type
  std::vector<int64_t> values;
  std::vector<hsize_t> dims;  // empty: 1-D of values.size()
  bool chunked = true;
  std::optional<int64_t> vocab_size = 256;
  std::optional<int64_t> eos_id;
  std::optional<std::string> tokenizer;
  bool attrs_on_root = false;  // put the attributes on "/" instead of the dataset
  // For the odd cases: called with the file and dataset ids before closing.
  std::function<void(hid_t file, hid_t dset)> extra;
};

void write_token_file(const std::string& path, const TokenFile& spec);

// Attribute writers for `extra` hooks.
void write_int_attr(hid_t obj, const char* name, int64_t value, hid_t type = H5T_STD_I64LE);
void write_float_attr(hid_t obj, const char* name, double value);
void write_int_array_attr(hid_t obj, const char* name, const std::vector<int64_t>& values);
void write_string_attr(hid_t obj, const char* name, const std::string& value, bool variable);

// A 1-D dataset `name` of file type `type` holding `n` values of memory type `mem`.
void write_1d(hid_t file, const char* name, hid_t type, hid_t mem, const void* values, hsize_t n);

// values[i] = i % modulus, a stream whose tokens reveal their offsets.
std::vector<int64_t> iota_tokens(int64_t n, int64_t modulus);

}  // namespace fsdp::test
