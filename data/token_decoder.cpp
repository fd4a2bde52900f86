#include "data/token_decoder.h"

#include <hdf5.h>

#include "common/error.h"
#include "common/h5_id.h"
#include "common/hdf5_lock.h"

namespace fsdp {
namespace {

// Length of the 1-D dataset `name`, or -1 when the file has none.
int64_t length_of(hid_t file, const char* name, const std::string& path) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return -1;
  H5Id d(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  H5Id space(d.valid() ? H5Dget_space(d.get()) : H5I_INVALID_HID, H5Sclose);
  hsize_t n = 0;
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 1 ||
      H5Sget_simple_extent_dims(space.get(), &n, nullptr) != 1)
    throw_error("'", path, "': ", name, " is not a 1-D dataset; remake the file with ",
                "tools/prepare_data.py");
  return int64_t(n);
}

void read_all(hid_t file, const char* name, hid_t mem_type, void* out, const std::string& path) {
  H5Id d(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!d.valid() || H5Dread(d.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
    throw_error("'", path, "': cannot read ", name, "; the file may be damaged");
}

}  // namespace

std::optional<TokenDecoder> TokenDecoder::open(const std::string& path, int64_t vocab_size,
                                               const std::string& tokenizer, std::string* why_not) {
  Hdf5Lock lock;
  H5Id file = open_read_only(path.c_str());
  if (!file.valid()) throw_error("'", path, "': cannot open it to read the decode table");
  const int64_t n_off = length_of(file.get(), "/token_offsets", path);
  const int64_t n_bytes = length_of(file.get(), "/token_bytes", path);
  if (n_off < 0 || n_bytes < 0) {
    if (tokenizer == "byte" && vocab_size == 256) return bytes();
    if (why_not)
      *why_not = "'" + path +
                 "' holds no decode table (/token_offsets, /token_bytes); remake it "
                 "with tools/prepare_data.py text to see samples as text";
    return std::nullopt;
  }
  if (n_off != vocab_size + 1)
    throw_error("'", path, "': /token_offsets has ", n_off, " entries for vocab_size ", vocab_size,
                " (needs vocab_size + 1); remake the file with tools/prepare_data.py");
  TokenDecoder d;
  d.offsets_.resize(size_t(n_off));
  d.bytes_.resize(size_t(n_bytes));
  read_all(file.get(), "/token_offsets", H5T_NATIVE_INT64, d.offsets_.data(), path);
  if (n_bytes > 0) read_all(file.get(), "/token_bytes", H5T_NATIVE_UINT8, d.bytes_.data(), path);
  if (d.offsets_.front() != 0 || d.offsets_.back() != n_bytes)
    throw_error("'", path, "': /token_offsets must run from 0 to the ", n_bytes,
                " bytes of /token_bytes; remake the file with tools/prepare_data.py");
  for (size_t i = 1; i < d.offsets_.size(); ++i)
    if (d.offsets_[i] < d.offsets_[i - 1])
      throw_error("'", path, "': /token_offsets decreases at token ", i - 1,
                  "; remake the file with tools/prepare_data.py");
  return d;
}

TokenDecoder TokenDecoder::bytes() {
  TokenDecoder d;
  for (int i = 0; i <= 256; ++i) d.offsets_.push_back(i);
  for (int i = 0; i < 256; ++i) d.bytes_ += char(i);
  return d;
}

std::string TokenDecoder::decode(const std::vector<int32_t>& ids) const {
  std::string raw;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) continue;
    raw.append(bytes_, size_t(offsets_[size_t(id)]),
               size_t(offsets_[size_t(id) + 1] - offsets_[size_t(id)]));
  }
  return valid_utf8(raw);
}

std::string valid_utf8(const std::string& s) {
  static const char kReplacement[] = "\xEF\xBF\xBD";
  std::string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    // Length and the allowed range of the second byte (no overlongs,
    // surrogates or code points past U+10FFFF), per RFC 3629.
    size_t len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80)
      len = 1;
    else if (c >= 0xC2 && c <= 0xDF)
      len = 2;
    else if (c == 0xE0)
      len = 3, lo = 0xA0;
    else if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF)
      len = 3;
    else if (c == 0xED)
      len = 3, hi = 0x9F;
    else if (c == 0xF0)
      len = 4, lo = 0x90;
    else if (c >= 0xF1 && c <= 0xF3)
      len = 4;
    else if (c == 0xF4)
      len = 4, hi = 0x8F;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) {
      const unsigned char b = p[i + k];
      ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    }
    if (ok) {
      out.append(s, i, len);
      i += len;
    } else {
      out += kReplacement;
      ++i;
    }
  }
  return out;
}

}  // namespace fsdp
