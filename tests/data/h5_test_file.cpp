#include "h5_test_file.h"

#include <stdlib.h>

#include <algorithm>
#include <stdexcept>

#include "common/hdf5_lock.h"

namespace fsdp::test {

namespace {

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("test fixture: ") + what + " failed");
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "fsdp_data_test_XXXXXX").string();
  check(mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_int_attr(hid_t obj, const char* name, int64_t value, hid_t type) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  check(attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT64, &value) >= 0, "int attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

void write_float_attr(hid_t obj, const char* name, double value) {
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  check(attr >= 0 && H5Awrite(attr, H5T_NATIVE_DOUBLE, &value) >= 0, "float attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

void write_int_array_attr(hid_t obj, const char* name, const std::vector<int64_t>& values) {
  const hsize_t n = values.size();
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  check(attr >= 0 && H5Awrite(attr, H5T_NATIVE_INT64, values.data()) >= 0, "array attribute");
  H5Aclose(attr);
  H5Sclose(space);
}

void write_string_attr(hid_t obj, const char* name, const std::string& value, bool variable) {
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_cset(type, H5T_CSET_UTF8);
  H5Tset_size(type, variable ? H5T_VARIABLE : value.size());
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  const char* ptr = value.c_str();
  const void* buf = variable ? static_cast<const void*>(&ptr) : static_cast<const void*>(ptr);
  check(attr >= 0 && H5Awrite(attr, type, buf) >= 0, "string attribute");
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void write_token_file(const std::string& path, const TokenFile& spec) {
  // A loader's reader thread may be reading another file meanwhile.
  Hdf5Lock lock;
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  check(file >= 0, "H5Fcreate");
  std::vector<hsize_t> dims = spec.dims;
  if (dims.empty()) dims = {spec.values.size()};
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  hsize_t total = 1;
  for (hsize_t d : dims) total *= d;
  if (spec.chunked && total > 0) {
    std::vector<hsize_t> chunk(dims.size(), 1);
    chunk.back() = std::min<hsize_t>(dims.back(), 4096);
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
  }
  const hid_t dset =
      H5Dcreate2(file, spec.dataset.c_str(), spec.type, space, lcpl, dcpl, H5P_DEFAULT);
  check(dset >= 0, "H5Dcreate2");
  if (total > 0)
    check(H5Dwrite(dset, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, spec.values.data()) >= 0,
          "H5Dwrite");
  const hid_t holder = spec.attrs_on_root ? file : dset;
  if (spec.vocab_size) write_int_attr(holder, "vocab_size", *spec.vocab_size);
  if (spec.eos_id) write_int_attr(holder, "eos_id", *spec.eos_id);
  if (spec.tokenizer) write_string_attr(holder, "tokenizer", *spec.tokenizer, true);
  if (spec.extra) spec.extra(file, dset);
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  H5Sclose(space);
  check(H5Fclose(file) >= 0, "H5Fclose");
}

std::vector<int64_t> iota_tokens(int64_t n, int64_t modulus) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i % modulus;
  return v;
}

void write_1d(hid_t file, const char* name, hid_t type, hid_t mem, const void* values, hsize_t n) {
  const hid_t space = H5Screate_simple(1, &n, nullptr);
  const hid_t d = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (n > 0) H5Dwrite(d, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, values);
  H5Dclose(d);
  H5Sclose(space);
}

}  // namespace fsdp::test
