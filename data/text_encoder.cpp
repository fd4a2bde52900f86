#include "data/text_encoder.h"

#include <hdf5.h>

#include <limits>

#include "common/error.h"
#include "common/h5_id.h"
#include "common/hdf5_lock.h"
#include "data/gpt2_pretokenize.h"

namespace fsdp {
namespace {

constexpr int32_t kNoRank = std::numeric_limits<int32_t>::max();

uint64_t pair_key(int32_t left, int32_t right) {
  return uint64_t(uint32_t(left)) << 32 | uint32_t(right);
}

// /token_merges as rows of (left, right, merged).
std::vector<std::array<int32_t, 3>> read_merges(const std::string& path) {
  Hdf5Lock lock;
  H5Id file = open_read_only(path.c_str());
  if (!file.valid()) throw_error("'", path, "': cannot open it to read /token_merges");
  const auto damaged = [&](const char* what) {
    throw_error("'", path, "': /token_merges ", what, "; remake the file with ",
                "tools/prepare_data.py");
  };
  if (H5Lexists(file.get(), "/token_merges", H5P_DEFAULT) <= 0)
    damaged("is missing (its text_encoder attribute needs it)");
  H5Id d(H5Dopen2(file.get(), "/token_merges", H5P_DEFAULT), H5Dclose);
  H5Id space(d.valid() ? H5Dget_space(d.get()) : H5I_INVALID_HID, H5Sclose);
  hsize_t dims[2] = {0, 0};
  if (!space.valid() || H5Sget_simple_extent_ndims(space.get()) != 2 ||
      H5Sget_simple_extent_dims(space.get(), dims, nullptr) != 2 || dims[1] != 3)
    damaged("is not an [n, 3] array");
  std::vector<std::array<int32_t, 3>> rows(static_cast<size_t>(dims[0]));
  if (dims[0] > 0 &&
      H5Dread(d.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0)
    damaged("cannot be read");
  return rows;
}

}  // namespace

std::optional<TextEncoder> TextEncoder::open(const TokenizerId& id, std::optional<int> eos_id,
                                             std::string* why_not) {
  TextEncoder e;
  const std::string& kind = id.text_encoder;
  if (kind.empty() && id.name == "byte" && id.vocab_size == 256) {
    e.rule_ = Rule::bytes;  // byte files from before the attribute
  } else if (kind == "byte") {
    if (id.vocab_size != 256)
      throw_error("'", id.file, "': text_encoder byte needs vocab_size 256, not ", id.vocab_size);
    e.rule_ = Rule::bytes;
  } else if (kind == "gpt2-bpe-ranks") {
    e.rule_ = Rule::ranks;
  } else if (kind == "gpt2-bpe-merges") {
    e.rule_ = Rule::merges;
  } else if (kind.empty()) {
    if (why_not)
      *why_not = "'" + id.file + "' does not say how to encode text with its tokenizer '" +
                 id.name +
                 "': tools/prepare_data.py text writes that (its text_encoder attribute) for the "
                 "byte and bpe tokenizers, GPT-2 style hf: tokenizers and tiktoken:gpt2; remake "
                 "the file with one, or leave --prompt out";
    return std::nullopt;
  } else {
    throw_error("'", id.file, "': unknown text_encoder '", kind,
                "' (this build knows byte, gpt2-bpe-ranks, gpt2-bpe-merges); use a newer "
                "fsdptrain or remake the file");
  }
  e.byte_id_.fill(-1);
  if (e.rule_ == Rule::bytes) {
    for (int b = 0; b < 256; ++b) e.byte_id_[size_t(b)] = b;
    return e;
  }
  std::string no_table;
  const std::optional<TokenDecoder> table =
      TokenDecoder::open(id.file, id.vocab_size, id.name, &no_table);
  if (!table) throw_error(no_table);
  // Special tokens are not text: the end-of-text token's spelling never
  // merges into it (the pre-tokenizer cuts "<|endoftext|>" apart anyway).
  for (int32_t i = 0; i < int32_t(table->vocab_size()); ++i) {
    const std::string_view b = table->bytes_of(i);
    if (b.empty() || (eos_id && i == *eos_id)) continue;
    if (b.size() == 1 && e.byte_id_[uint8_t(b[0])] < 0) e.byte_id_[uint8_t(b[0])] = i;
    if (e.rule_ == Rule::ranks) e.ids_.emplace(std::string(b), i);
  }
  if (e.rule_ == Rule::merges) {
    const auto rows = read_merges(id.file);
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto [left, right, merged] = rows[r];
      const auto in_vocab = [&](int32_t v) { return v >= 0 && v < table->vocab_size(); };
      if (!in_vocab(left) || !in_vocab(right) || !in_vocab(merged) ||
          std::string(table->bytes_of(left)) + std::string(table->bytes_of(right)) !=
              table->bytes_of(merged))
        throw_error("'", id.file, "': /token_merges row ", r,
                    " does not join two tokens into a third of the decode table; remake the "
                    "file with tools/prepare_data.py");
      e.merges_.emplace(pair_key(left, right), std::pair(int32_t(r), merged));
    }
  }
  return e;
}

std::vector<int32_t> TextEncoder::encode(std::string_view text) const {
  if (valid_utf8(std::string(text)) != text)
    throw_error("the text '", valid_utf8(std::string(text)),
                "' is not valid UTF-8 (the replaced bytes show as U+FFFD)");
  std::vector<int32_t> ids;
  if (rule_ == Rule::bytes) {
    for (char c : text) ids.push_back(byte_id_[uint8_t(c)]);
    return ids;
  }
  for (std::string_view piece : gpt2_pieces(text)) {
    for (char c : piece)
      if (byte_id_[uint8_t(c)] < 0)
        throw_error("the tokenizer has no token for byte 0x", "0123456789abcdef"[uint8_t(c) >> 4],
                    "0123456789abcdef"[uint8_t(c) & 15], " of '", piece, "'");
    if (rule_ == Rule::ranks)
      bpe(piece, &ids);
    else
      bpe_by_merges(piece, &ids);
  }
  return ids;
}

// tiktoken's rule: the piece itself where it is a token, else from single
// bytes, merging the adjacent pair whose joined bytes have the lowest id.
void TextEncoder::bpe(std::string_view piece, std::vector<int32_t>* out) const {
  if (auto it = ids_.find(std::string(piece)); it != ids_.end()) {
    out->push_back(it->second);
    return;
  }
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  for (;;) {
    int32_t best = kNoRank;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (auto it = ids_.find(parts[i] + parts[i + 1]); it != ids_.end() && it->second < best)
        best = it->second, at = i;
    if (best == kNoRank) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + std::ptrdiff_t(at) + 1);
  }
  for (const std::string& p : parts)
    out->push_back(p.size() == 1 ? byte_id_[uint8_t(p[0])] : ids_.at(p));
}

// Hugging Face's rule: from single bytes, apply the listed merge of lowest
// rank among adjacent pairs (leftmost on a tie), until none applies.
void TextEncoder::bpe_by_merges(std::string_view piece, std::vector<int32_t>* out) const {
  std::vector<int32_t> ids;
  for (char c : piece) ids.push_back(byte_id_[uint8_t(c)]);
  for (;;) {
    int32_t best = kNoRank, merged = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i)
      if (auto it = merges_.find(pair_key(ids[i], ids[i + 1]));
          it != merges_.end() && it->second.first < best)
        best = it->second.first, merged = it->second.second, at = i;
    if (best == kNoRank) break;
    ids[at] = merged;
    ids.erase(ids.begin() + std::ptrdiff_t(at) + 1);
  }
  out->insert(out->end(), ids.begin(), ids.end());
}

}  // namespace fsdp
