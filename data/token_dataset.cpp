#include "data/token_dataset.h"

#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <type_traits>
#include <vector>

#include "common/error.h"
#include "common/h5_id.h"
#include "common/hdf5_lock.h"
#include "data/h5_vlen_guard.h"

namespace fsdp {

static_assert(std::is_same_v<hid_t, int64_t>, "token_dataset.h stores hid_t as int64_t");

namespace {

// Bounds the memory of the open-time scan whatever the file's size.
constexpr int64_t kScanChunkTokens = int64_t{1} << 22;
constexpr size_t kMaxListedDatasets = 8;

// Prefix shared by every message about one source.
struct Where {
  const DataSource& src;
  const std::string& flag;
  std::string in() const { return src.dataset + " in '" + src.file + "'"; }
};

std::string describe_type(hid_t type) {
  const size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_INTEGER:
      return (H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int") + std::to_string(bits);
    case H5T_FLOAT:
      return "float" + std::to_string(bits);
    case H5T_STRING:
      return "string";
    case H5T_COMPOUND:
      return "compound";
    case H5T_ENUM:
      return "enum";
    case H5T_ARRAY:
      return "array";
    case H5T_BITFIELD:
      return "bitfield";
    case H5T_OPAQUE:
      return "opaque";
    case H5T_REFERENCE:
      return "reference";
    case H5T_VLEN:
      return "variable-length";
    default:
      return "an unknown type";
  }
}

// Distinguishes the cases HDF5 reports alike ("unable to open file"), so the
// user learns whether the path, the permissions or the format is wrong.
void check_readable(const Where& w) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto status = fs::status(w.src.file, ec);
  if (!fs::exists(status)) throw_error(w.flag, ": cannot open '", w.src.file, "': no such file");
  if (fs::is_directory(status))
    throw_error(w.flag, ": cannot open '", w.src.file, "': it is a directory, not a file");
  std::ifstream probe(w.src.file, std::ios::binary);
  if (!probe)
    throw_error(w.flag, ": cannot open '", w.src.file, "': permission denied or unreadable");
}

H5Id open_file(const Where& w) {
  check_readable(w);
  const htri_t is_hdf5 = H5Fis_hdf5(w.src.file.c_str());
  if (is_hdf5 == 0)
    throw_error(w.flag, ": '", w.src.file,
                "' is not an HDF5 file; make token files with tools/prepare_data.py");
  if (is_hdf5 < 0)
    throw_error(w.flag, ": cannot open '", w.src.file, "': HDF5 cannot read its signature");

  H5Id file = open_read_only(w.src.file.c_str());
  if (!file.valid())
    throw_error(w.flag, ": cannot open '", w.src.file,
                "' as HDF5: the file may be truncated or corrupt");
  return file;
}

herr_t collect_dataset(hid_t group, const char* name, const H5L_info_t*, void* data) {
  auto& names = *static_cast<std::vector<std::string>*>(data);
  H5Id obj(H5Oopen(group, name, H5P_DEFAULT), H5Oclose);
  if (obj.valid() && H5Iget_type(obj.get()) == H5I_DATASET) names.emplace_back(name);
  return names.size() > kMaxListedDatasets ? 1 : 0;  // 1 stops the iteration
}

std::string root_datasets(hid_t file) {
  std::vector<std::string> names;
  if (H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_dataset, &names) < 0) return "";
  if (names.empty()) return " (the file has no datasets at /)";
  std::string list;
  for (size_t i = 0; i < std::min(names.size(), kMaxListedDatasets); ++i)
    list.append(i ? ", /" : "/").append(names[i]);
  if (names.size() > kMaxListedDatasets) list += ", ...";
  return " (datasets at /: " + list + ")";
}

// Walks the path one link at a time: H5Lexists on "/a/b" fails outright
// instead of answering "no" when "/a" is missing.
H5Id open_dataset(hid_t file, const Where& w) {
  const std::string& path = w.src.dataset;
  const auto missing = [&] {
    throw_error(w.flag, ": '", w.src.file, "' has no dataset ", path, root_datasets(file),
                "; name one as FILE:/DATASET");
  };
  std::string prefix;
  size_t pos = 0;
  while (pos < path.size()) {
    const size_t end = std::min(path.find('/', pos), path.size());
    if (end > pos) {
      prefix.append("/").append(path, pos, end - pos);
      if (H5Lexists(file, prefix.c_str(), H5P_DEFAULT) <= 0) missing();
    }
    pos = end + 1;
  }
  if (prefix.empty()) missing();
  H5Id obj(H5Oopen(file, prefix.c_str(), H5P_DEFAULT), H5Oclose);
  if (!obj.valid()) missing();  // e.g. a dangling soft link
  if (H5Iget_type(obj.get()) != H5I_DATASET)
    throw_error(w.flag, ": ", w.in(), " is a group, not a dataset", root_datasets(file),
                "; name a dataset as FILE:/DATASET");
  obj.reset();
  H5Id dset(H5Dopen2(file, prefix.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) throw_error(w.flag, ": cannot open dataset ", w.in());
  return dset;
}

// Returns the dataset's length after checking shape and element type.
int64_t check_shape(hid_t dset, const Where& w, int* bytes_per_token) {
  H5Id space(H5Dget_space(dset), H5Sclose);
  if (!space.valid()) throw_error(w.flag, ": cannot read the shape of ", w.in());
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) throw_error(w.flag, ": cannot read the shape of ", w.in());
  if (rank != 1) {
    hsize_t dims[H5S_MAX_RANK] = {};
    H5Sget_simple_extent_dims(space.get(), dims, nullptr);
    std::string shape;
    for (int i = 0; i < rank; ++i) shape += (i ? " x " : "") + std::to_string(dims[i]);
    throw_error(w.flag, ": ", w.in(), " is ", rank, "-D", rank ? " [" + shape + "]" : "",
                "; expected a 1-D array of token ids");
  }
  hsize_t n = 0;
  if (H5Sget_simple_extent_dims(space.get(), &n, nullptr) < 0)
    throw_error(w.flag, ": cannot read the shape of ", w.in());

  H5Id type(H5Dget_type(dset), H5Tclose);
  if (!type.valid()) throw_error(w.flag, ": cannot read the element type of ", w.in());
  const size_t size = H5Tget_size(type.get());
  if (H5Tget_class(type.get()) != H5T_INTEGER || H5Tget_sign(type.get()) != H5T_SGN_NONE ||
      (size != 2 && size != 4))
    throw_error(w.flag, ": ", w.in(), " holds ", describe_type(type.get()),
                "; expected unsigned 16- or 32-bit integers (uint16 or uint32)");
  *bytes_per_token = static_cast<int>(size);
  if (n == 0) throw_error(w.flag, ": ", w.in(), " has no tokens");
  return static_cast<int64_t>(n);
}

// Attributes live on the dataset; files that keep them on the root group
// (one token stream per file) are accepted too.
// The object holding attribute `name`: the dataset, else the file's root;
// -1 where neither has it.
hid_t attr_holder(hid_t dset, hid_t file, const char* name) {
  for (hid_t holder : {dset, file})
    if (H5Aexists(holder, name) > 0) return holder;
  return -1;
}

H5Id open_attr(hid_t dset, hid_t file, const char* name) {
  const hid_t holder = attr_holder(dset, file, name);
  return holder < 0 ? H5Id() : H5Id(H5Aopen(holder, name, H5P_DEFAULT), H5Aclose);
}

std::optional<int64_t> read_int_attr(hid_t dset, hid_t file, const char* name, const Where& w) {
  H5Id attr = open_attr(dset, file, name);
  if (!attr.valid()) return std::nullopt;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  H5Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!type.valid() || !space.valid())
    throw_error(w.flag, ": cannot read attribute ", name, " of ", w.in());
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    throw_error(w.flag, ": attribute ", name, " of ", w.in(), " is ", describe_type(type.get()),
                "; it must be an integer");
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw_error(w.flag, ": attribute ", name, " of ", w.in(),
                " must be a single integer, not an array");
  if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    // Read as int64, HDF5 would clip 2^64-1 to 2^63-1 and report that.
    uint64_t value = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_UINT64, &value) < 0)
      throw_error(w.flag, ": cannot read attribute ", name, " of ", w.in(), " as an integer");
    if (value > uint64_t(std::numeric_limits<int64_t>::max()))
      throw_error(w.flag, ": attribute ", name, " of ", w.in(), " is ", value,
                  ", beyond the range of int64");
    return int64_t(value);
  }
  int64_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0)
    throw_error(w.flag, ": cannot read attribute ", name, " of ", w.in(), " as a 64-bit integer");
  return value;
}

// A dataset stored through a filter this HDF5 lacks (h5py's lzf, a plugin
// that is not installed) fails at the first read as if the file were
// corrupt; said here, the message names the filter and the way out.
void check_filters(hid_t dset, const Where& w) {
  H5Id dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid()) return;
  const int n = H5Pget_nfilters(dcpl.get());
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    size_t nvalues = 0;
    char name[128] = {0};
    const H5Z_filter_t id = H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &nvalues, nullptr,
                                           sizeof name, name, &config);
    if (id < 0 || H5Zfilter_avail(id) > 0) continue;
    throw_error(w.flag, ": ", w.in(), " is stored with HDF5 filter ", id,
                name[0] ? " (" + std::string(name) + ")" : std::string(),
                ", which this build's HDF5 cannot decode; rewrite it without it, e.g. h5repack "
                "-f NONE, or with gzip");
  }
}

// A chunked dataset's index (which chunk lives where) is metadata HDF5 1.10
// reads without checking a chunk's coordinates; a damaged entry can then
// serve other bytes, or crash a later read. Every entry must sit on the chunk
// grid inside the dataset, once each, with storage behind it.
void check_chunk_index(hid_t dset, int64_t size, const Where& w) {
  auto damaged = [&](const std::string& what) {
    throw_error(w.flag, ": ", w.in(), " has a damaged chunk ", what,
                "; remake the file with tools/prepare_data.py");
  };
  H5Id dcpl(H5Dget_create_plist(dset), H5Pclose);
  if (!dcpl.valid() || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return;
  hsize_t chunk = 0;
  if (H5Pget_chunk(dcpl.get(), 1, &chunk) != 1 || chunk == 0) damaged("layout");
  H5Id space(H5Dget_space(dset), H5Sclose);
  hsize_t n = 0;
  if (!space.valid() || H5Dget_num_chunks(dset, space.get(), &n) < 0) damaged("index");
  const hsize_t grid = (hsize_t(size) + chunk - 1) / chunk;
  if (n > grid)
    damaged("index (" + std::to_string(n) + " chunks where " + std::to_string(grid) + " fit)");
  std::vector<bool> seen(size_t(grid), false);
  for (hsize_t i = 0; i < n; ++i) {
    hsize_t offset = 0, bytes = 0;
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    const bool bad = H5Dget_chunk_info(dset, space.get(), i, &offset, &mask, &addr, &bytes) < 0 ||
                     offset % chunk != 0 || offset >= hsize_t(size) ||
                     seen[size_t(offset / chunk)] || addr == HADDR_UNDEF || bytes == 0;
    if (bad) damaged("index (entry " + std::to_string(i) + " of " + std::to_string(n) + ")");
    seen[size_t(offset / chunk)] = true;
  }
}

std::string read_string_attr(hid_t dset, hid_t file, const char* name, const Where& w) {
  H5Id attr = open_attr(dset, file, name);
  if (!attr.valid()) return "";
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (!type.valid() || H5Tget_class(type.get()) != H5T_STRING)
    throw_error(w.flag, ": attribute ", name, " of ", w.in(), " must be a string");
  // H5Aread writes every element: an array would overflow the one string.
  H5Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1)
    throw_error(w.flag, ": attribute ", name, " of ", w.in(),
                " must be a single string, not an array");
  H5Id mem(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!mem.valid() || H5Tset_cset(mem.get(), H5Tget_cset(type.get())) < 0)
    throw_error(w.flag, ": cannot read attribute ", name, " of ", w.in());
  const auto fail = [&] { throw_error(w.flag, ": cannot read attribute ", name, " of ", w.in()); };
  if (H5Tis_variable_str(type.get()) > 0) {
    // HDF5 1.10 follows a damaged heap reference out of bounds: checked first.
    if (const std::string bad = vlen_attr_damage(file, attr_holder(dset, file, name), name);
        !bad.empty())
      throw_error(w.flag, ": attribute ", name, " of ", w.in(), " is damaged (", bad,
                  "); the file is corrupt: write it again (tools/prepare_data.py)");
    if (H5Tset_size(mem.get(), H5T_VARIABLE) < 0) fail();
    char* value = nullptr;
    if (H5Aread(attr.get(), mem.get(), &value) < 0) fail();
    std::string out = value ? value : "";
    H5free_memory(value);
    return out;
  }
  const size_t size = H5Tget_size(type.get());
  std::string out(size + 1, '\0');
  if (H5Tset_size(mem.get(), size + 1) < 0 || H5Aread(attr.get(), mem.get(), out.data()) < 0)
    fail();
  out.resize(out.find('\0'));
  return out;
}

// Reads [offset, offset + count) in memory type `mem_type`; the one place a
// token read touches HDF5.
void read_slab(hid_t dset, hid_t mem_type, int64_t offset, int64_t count, void* out,
               const Where& w) {
  H5Id file_space(H5Dget_space(dset), H5Sclose);
  const hsize_t start = static_cast<hsize_t>(offset), n = static_cast<hsize_t>(count);
  H5Id mem_space(H5Screate_simple(1, &n, nullptr), H5Sclose);
  if (!file_space.valid() || !mem_space.valid() ||
      H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &n, nullptr) < 0 ||
      H5Dread(dset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, out) < 0)
    throw_error(w.flag, ": reading tokens [", offset, ", ", offset + count, ") of ", w.in(),
                " failed; the file may be truncated or corrupt");
}

[[noreturn]] void throw_bad_token(int64_t token, int64_t offset, int vocab_size, const Where& w) {
  throw_error(w.flag, ": token ", token, " at offset ", offset, " of ", w.in(),
              " is >= vocab_size ", vocab_size,
              "; the file does not match its vocab_size attribute");
}

// Reads [offset, offset + count) as stored (16 or 32 bits) and widens to int32
// in place, checking each value: HDF5's own uint16 -> int32 conversion goes
// through its type-conversion buffers and is slower than the read.
void read_checked(hid_t dset, int bytes_per_token, int vocab_size, int64_t offset, int64_t count,
                  int32_t* out, const Where& w) {
  if (bytes_per_token == 2) {
    // The 16-bit values land in the upper half of `out`; widening front to
    // back only overwrites values already consumed.
    auto* narrow = reinterpret_cast<uint16_t*>(out) + count;
    read_slab(dset, H5T_NATIVE_UINT16, offset, count, narrow, w);
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t t = narrow[i];
      if (t >= vocab_size) throw_bad_token(t, offset + i, vocab_size, w);
      out[i] = t;
    }
  } else {
    auto* wide = reinterpret_cast<uint32_t*>(out);
    read_slab(dset, H5T_NATIVE_UINT32, offset, count, wide, w);
    for (int64_t i = 0; i < count; ++i)
      if (wide[i] >= static_cast<uint32_t>(vocab_size))
        throw_bad_token(wide[i], offset + i, vocab_size, w);
  }
}

}  // namespace

DataSource DataSource::parse(const std::string& spec, const std::string& flag) {
  if (spec.empty()) throw_error(flag, ": empty data path; give FILE.h5 or FILE.h5:/DATASET");
  DataSource src;
  const size_t colon = spec.rfind(":/");
  if (colon == std::string::npos || colon == 0) {
    src.file = spec;
  } else {
    src.file = spec.substr(0, colon);
    src.dataset = spec.substr(colon + 1);
  }
  return src;
}

TokenDataset TokenDataset::open(const DataSource& source, const std::string& flag, TokenScan scan) {
  // Declared before every H5Id so it is released after their closes.
  Hdf5Lock lock;
  // Our one line replaces HDF5's multi-line error stack on stderr.
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  TokenDataset ds;
  ds.source_ = source;
  ds.flag_ = flag;
  const Where w{ds.source_, ds.flag_};

  H5Id file = open_file(w);
  H5Id dset = open_dataset(file.get(), w);
  ds.size_ = check_shape(dset.get(), w, &ds.bytes_per_token_);
  check_filters(dset.get(), w);
  check_chunk_index(dset.get(), ds.size_, w);

  const auto vocab = read_int_attr(dset.get(), file.get(), "vocab_size", w);
  if (!vocab)
    throw_error(flag, ": ", w.in(),
                " has no vocab_size attribute; add one (an integer) or remake the file with "
                "tools/prepare_data.py");
  if (*vocab <= 0 || *vocab > std::numeric_limits<int32_t>::max())
    throw_error(flag, ": vocab_size ", *vocab, " of ", w.in(), " must be in [1, 2^31)");
  ds.vocab_size_ = static_cast<int>(*vocab);

  if (const auto eos = read_int_attr(dset.get(), file.get(), "eos_id", w)) {
    if (*eos < 0 || *eos >= *vocab)
      throw_error(flag, ": eos_id ", *eos, " of ", w.in(), " is outside [0, vocab_size ", *vocab,
                  ")");
    ds.eos_id_ = static_cast<int>(*eos);
  }
  ds.tokenizer_ = read_string_attr(dset.get(), file.get(), "tokenizer", w);
  ds.tokenizer_sha256_ = read_string_attr(dset.get(), file.get(), "tokenizer_sha256", w);
  ds.text_encoder_ = read_string_attr(dset.get(), file.get(), "text_encoder", w);

  ds.dataset_id_ = dset.release();
  ds.file_id_ = file.release();
  if (scan == TokenScan::all) ds.check_tokens(0, ds.size_);
  return ds;
}

TokenDataset::TokenDataset(TokenDataset&& o) noexcept {
  *this = std::move(o);
}

TokenDataset& TokenDataset::operator=(TokenDataset&& o) noexcept {
  if (this != &o) {
    close();
    source_ = std::move(o.source_);
    flag_ = std::move(o.flag_);
    file_id_ = std::exchange(o.file_id_, -1);
    dataset_id_ = std::exchange(o.dataset_id_, -1);
    size_ = o.size_;
    vocab_size_ = o.vocab_size_;
    eos_id_ = o.eos_id_;
    tokenizer_ = std::move(o.tokenizer_);
    tokenizer_sha256_ = std::move(o.tokenizer_sha256_);
    text_encoder_ = std::move(o.text_encoder_);
    bytes_per_token_ = o.bytes_per_token_;
  }
  return *this;
}

TokenDataset::~TokenDataset() {
  close();
}

void TokenDataset::close() noexcept {
  if (dataset_id_ < 0 && file_id_ < 0) return;
  Hdf5Lock lock;
  if (dataset_id_ >= 0) H5Dclose(dataset_id_);
  if (file_id_ >= 0) H5Fclose(file_id_);
  dataset_id_ = file_id_ = -1;
}

void TokenDataset::read(int64_t offset, int64_t count, int32_t* out) const {
  FSDP_CHECK(dataset_id_ >= 0, "read from a closed TokenDataset");
  FSDP_CHECK(offset >= 0 && count >= 0 && offset + count <= size_, "tokens [", offset, ", ",
             offset + count, ") outside [0, ", size_, ")");
  if (count == 0) return;
  Hdf5Lock lock;
  read_checked(dataset_id_, bytes_per_token_, vocab_size_, offset, count, out,
               Where{source_, flag_});
}

void TokenDataset::check_tokens(int64_t begin, int64_t end) const {
  FSDP_CHECK(dataset_id_ >= 0, "scan of a closed TokenDataset");
  FSDP_CHECK(begin >= 0 && begin <= end && end <= size_, "tokens [", begin, ", ", end,
             ") outside [0, ", size_, ")");
  std::vector<int32_t> buf(static_cast<size_t>(std::min(end - begin, kScanChunkTokens)));
  for (int64_t offset = begin; offset < end; offset += kScanChunkTokens)
    read(offset, std::min(kScanChunkTokens, end - offset), buf.data());
}

void TokenDataset::require_min_tokens(int64_t n, const std::string& why) const {
  if (size_ < n)
    throw_error(flag_, ": ", source_.dataset, " in '", source_.file, "' has ", size_,
                " tokens, but ", why, " needs at least ", n);
}

}  // namespace fsdp
