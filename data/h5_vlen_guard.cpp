#include "data/h5_vlen_guard.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>
#include <vector>

#include "common/hdf5_lock.h"

namespace fsdp {
namespace {

// What is wrong, thrown from anywhere in the walk and returned as the text.
struct Damage {
  std::string what;
};

// The file's bytes where asked; a range past its end is damage.
class FileBytes {
 public:
  explicit FileBytes(const std::string& path) : in_(path, std::ios::binary) {
    in_.seekg(0, std::ios::end);
    size_ = in_ ? uint64_t(in_.tellg()) : 0;
  }
  std::vector<uint8_t> read(uint64_t at, uint64_t n, const char* what) {
    if (at > size_ || n > size_ - at)
      throw Damage{std::string(what) + " runs past the end of the file"};
    std::vector<uint8_t> b(static_cast<size_t>(n));
    in_.seekg(std::streamoff(at));
    in_.read(reinterpret_cast<char*>(b.data()), std::streamsize(n));
    if (!in_) throw Damage{std::string("reading ") + what + " failed"};
    return b;
  }
  uint64_t size() const { return size_; }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

// Little-endian, as every HDF5 structure field is.
uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

// Where addresses count from, and how wide addresses and lengths are.
struct Superblock {
  uint64_t base = 0;
  int offsets = 8, lengths = 8;
};

// The superblock sits at 0, 512, 1024, 2048, ... (after a user block).
Superblock find_superblock(FileBytes& f) {
  static const uint8_t sig[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  for (uint64_t at = 0; at + 40 <= f.size(); at = at == 0 ? 512 : 2 * at) {
    const std::vector<uint8_t> b = f.read(at, 40, "the superblock");
    if (std::memcmp(b.data(), sig, 8) != 0) continue;
    Superblock s;
    const int version = b[8];
    // Versions 0 and 1: sizes at bytes 13 and 14, the base address after
    // 16 bytes of fields (20 in version 1); 2 and 3: at 9, 10 and 12.
    const int o = version <= 1 ? 13 : 9, base_at = version == 0 ? 24 : version == 1 ? 28 : 12;
    s.offsets = b[o];
    s.lengths = b[o + 1];
    for (int w : {s.offsets, s.lengths})
      if (w != 2 && w != 4 && w != 8) throw Damage{"the superblock's field widths are invalid"};
    s.base = le(&b[base_at], s.offsets);
    return s;
  }
  throw Damage{"no superblock found"};
}

struct Message {
  int type = 0, flags = 0;
  std::vector<uint8_t> data;
};

constexpr int kAttributeMessage = 0x0c, kContinuationMessage = 0x10;
constexpr int kSharedMessage = 0x02;  // a message's flag: its data lives elsewhere

// Every message of the object header at `addr`, continuation chunks followed.
std::vector<Message> header_messages(FileBytes& f, const Superblock& sb, uint64_t addr) {
  const uint64_t at = sb.base + addr;
  std::vector<uint8_t> b = f.read(at, 16, "the object header");
  const bool v2 = std::memcmp(b.data(), "OHDR", 4) == 0;
  int hflags = 0;
  std::vector<std::pair<uint64_t, uint64_t>> chunks;  // (file offset, bytes) of message space
  if (!v2) {
    // Version 1: 16 bytes (version, reserved, message count, reference
    // count, the first chunk's size, 4 bytes of alignment), then messages.
    if (b[0] != 1) throw Damage{"the object header's version is unknown"};
    chunks.emplace_back(at + 16, le(&b[8], 4));
  } else {
    // Version 2: "OHDR", version, flags, optional times and attribute
    // phase-change values, the first chunk's size in 1-8 bytes.
    if (b[4] != 2) throw Damage{"the object header's version is unknown"};
    hflags = b[5];
    const uint64_t p = at + 6 + (hflags & 0x20 ? 16 : 0) + (hflags & 0x10 ? 4 : 0);
    const int w = 1 << (hflags & 3);
    b = f.read(p, uint64_t(w), "the object header");
    chunks.emplace_back(p + w, le(b.data(), w));
  }
  // Message header: v1 type(2) size(2) flags(1) reserved(3); v2 type(1)
  // size(2) flags(1), creation order(2) where the header tracks it.
  const size_t mh = v2 ? 4 + (hflags & 0x04 ? 2 : 0) : 8;
  std::vector<Message> out;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (c > 4096) throw Damage{"the object header's continuations do not end"};
    const std::vector<uint8_t> chunk =
        f.read(chunks[c].first, chunks[c].second, "an object header chunk");
    size_t p = 0, end = chunk.size();
    if (v2 && c > 0) {  // "OCHK", messages, a checksum
      if (end < 8 || std::memcmp(chunk.data(), "OCHK", 4) != 0)
        throw Damage{"an object header continuation has no OCHK signature"};
      p = 4;
      end -= 4;
    }
    while (end - p >= mh) {  // a shorter rest is a gap
      Message m;
      m.type = v2 ? chunk[p] : int(le(&chunk[p], 2));
      const size_t size = v2 ? le(&chunk[p + 1], 2) : le(&chunk[p + 2], 2);
      m.flags = v2 ? chunk[p + 3] : chunk[p + 4];
      p += mh;
      if (size > end - p) throw Damage{"an object header message runs past its chunk"};
      m.data.assign(chunk.begin() + std::ptrdiff_t(p), chunk.begin() + std::ptrdiff_t(p + size));
      p += size;
      if (m.type == kContinuationMessage) {
        if (size < size_t(sb.offsets + sb.lengths))
          throw Damage{"an object header continuation message is too short"};
        chunks.emplace_back(sb.base + le(m.data.data(), sb.offsets),
                            le(m.data.data() + sb.offsets, sb.lengths));
      }
      out.push_back(std::move(m));
    }
  }
  return out;
}

// The data of attribute message `m` when it is attribute `name`.
std::optional<std::vector<uint8_t>> attribute_data(const Message& m, const char* name) {
  const std::vector<uint8_t>& d = m.data;
  if (d.size() < 9) throw Damage{"an attribute message is too short"};
  const int version = d[0];
  if (version < 1 || version > 3) throw Damage{"an attribute message's version is unknown"};
  const uint64_t name_size = le(&d[2], 2), type_size = le(&d[4], 2), space_size = le(&d[6], 2);
  // Version 1 pads name, datatype and dataspace to 8 bytes; version 3 adds
  // the name's character set before the name.
  const auto pad = [&](uint64_t n) { return version == 1 ? (n + 7) / 8 * 8 : n; };
  uint64_t p = version == 3 ? 9 : 8;
  if (name_size == 0 || pad(name_size) > d.size() - p)
    throw Damage{"an attribute message's name runs past it"};
  std::string stored(reinterpret_cast<const char*>(&d[p]), size_t(name_size));
  stored.resize(std::strlen(stored.c_str()));
  if (stored != name) return std::nullopt;
  p += pad(name_size) + pad(type_size) + pad(space_size);
  if (p > d.size()) throw Damage{"the attribute message's value runs past it"};
  return std::vector<uint8_t>(d.begin() + std::ptrdiff_t(p), d.end());
}

// The global heap collection at `addr` must hold object `index` of `length`
// bytes. Walks the objects as HDF5 does (the collection's header: "GCOL",
// version 1, reserved(3), size; each object's: index(2), references(2),
// reserved(4), size, its data padded to 8; both 8 + L bytes; index 0, free
// space, ends them), stricter: an object running past the collection, or
// one index twice, is damage.
std::string check_heap_object(FileBytes& f, const Superblock& sb, uint64_t addr, uint64_t index,
                              uint64_t length) {
  const std::string where = "the global heap at address " + std::to_string(addr);
  const uint64_t hdr = 8 + uint64_t(sb.lengths);
  std::vector<uint8_t> b = f.read(sb.base + addr, hdr, "the global heap reference");
  if (std::memcmp(b.data(), "GCOL", 4) != 0 || b[4] != 1)
    return "its string's heap reference points at no global heap (address " + std::to_string(addr) +
           ")";
  const uint64_t size = le(&b[8], sb.lengths);
  // HDF5 makes collections of 4 KiB, or one string's size (a tokenizer's
  // few MB); 1 GiB is no collection, and would be read into memory.
  if (size < hdr || size > (uint64_t(1) << 30)) return where + " has an invalid size";
  b = f.read(sb.base + addr, size, where.c_str());
  std::optional<uint64_t> found;
  std::vector<bool> seen(65536, false);
  for (uint64_t p = hdr; size - p >= hdr;) {
    const uint64_t i = le(&b[p], 2), n = le(&b[p + 8], sb.lengths);
    if (i == 0) break;
    const uint64_t padded = (n + 7) / 8 * 8;
    if (n > size || padded > size - p - hdr)
      return "object " + std::to_string(i) + " of " + where + " runs past its end";
    if (seen[i]) return where + " holds object " + std::to_string(i) + " twice";
    seen[i] = true;
    if (i == index) found = n;
    p += hdr + padded;
  }
  if (!found)
    return "its string's heap reference names object " + std::to_string(index) + ", which " +
           where + " does not hold";
  if (*found != length)
    return "its string's length " + std::to_string(length) + " is not the " +
           std::to_string(*found) + " bytes " + where + " holds for it";
  return "";
}

haddr_t object_address(hid_t holder) {
#if H5_VERSION_GE(1, 12, 0)
  H5O_info2_t info;
  haddr_t addr = HADDR_UNDEF;
  if (H5Oget_info3(holder, &info, H5O_INFO_BASIC) < 0 ||
      H5VLnative_token_to_addr(holder, info.token, &addr) < 0)
    return HADDR_UNDEF;
  return addr;
#else
  H5O_info_t info;
  return H5Oget_info2(holder, &info, H5O_INFO_BASIC) < 0 ? HADDR_UNDEF : info.addr;
#endif
}

}  // namespace

std::string vlen_attr_damage(hid_t file, hid_t holder, const char* name) {
  std::string path;
  haddr_t addr = HADDR_UNDEF;
  {
    Hdf5Lock lock;
    const ssize_t n = H5Fget_name(file, nullptr, 0);
    if (n > 0) {
      path.resize(size_t(n) + 1);
      H5Fget_name(file, path.data(), path.size());
      path.resize(size_t(n));
    }
    addr = object_address(holder);
  }
  if (path.empty() || addr == HADDR_UNDEF) return "its object cannot be located";
  try {
    FileBytes f(path);
    const Superblock sb = find_superblock(f);
    for (const Message& m : header_messages(f, sb, addr)) {
      if (m.type != kAttributeMessage || (m.flags & kSharedMessage)) continue;
      const std::optional<std::vector<uint8_t>> data = attribute_data(m, name);
      if (!data) continue;
      // One element: the length (4), the collection's address, the index (4).
      if (data->size() < 8 + size_t(sb.offsets))
        return "its value is too short for a string's heap reference";
      const uint64_t length = le(data->data(), 4);
      if (length == 0) return "";  // an empty string reads nothing from the heap
      return check_heap_object(f, sb, le(data->data() + 4, sb.offsets),
                               le(data->data() + 4 + sb.offsets, 4), length);
    }
    return "";  // not in the header: dense storage, which HDF5 reads unchecked
  } catch (const Damage& d) {
    return d.what;
  }
}

}  // namespace fsdp
