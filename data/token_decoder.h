// Token ids back to text, for the samples fsdptrain prints: the decode table
// tools/prepare_data.py writes beside /tokens (/token_offsets: int64,
// vocab_size + 1 non-decreasing entries from 0; /token_bytes: uint8, id i is
// bytes[offsets[i], offsets[i+1])), or the bytes themselves for the byte
// tokenizer, which needs no table. Data files are untrusted: a table that does
// not fit its vocabulary is one error naming the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fsdp {

class TokenDecoder {
 public:
  // The decoder of a token file with `vocab_size` tokens made by `tokenizer`
  // (its attribute); nullopt, with the reason in *why_not, when the file has
  // no table and the tokenizer is not "byte" (a file made before the table
  // existed, or by `prepare_data.py array`).
  static std::optional<TokenDecoder> open(const std::string& file, int64_t vocab_size,
                                          const std::string& tokenizer, std::string* why_not);
  // id i -> byte i, for vocab_size 256.
  static TokenDecoder bytes();

  // The concatenated bytes of `ids` as valid UTF-8: sequences a token cut in
  // half (at a sample's end) or that were never UTF-8 become U+FFFD, so the
  // text can go into JSON. Ids outside the vocabulary decode to nothing.
  std::string decode(const std::vector<int32_t>& ids) const;
  int64_t vocab_size() const { return int64_t(offsets_.size()) - 1; }
  // The raw bytes of token `id` (in [0, vocab_size)).
  std::string_view bytes_of(int32_t id) const {
    return std::string_view(bytes_).substr(size_t(offsets_[size_t(id)]),
                                           size_t(offsets_[size_t(id) + 1] - offsets_[size_t(id)]));
  }
  // The same id -> bytes table.
  bool operator==(const TokenDecoder&) const = default;

 private:
  std::vector<int64_t> offsets_;
  std::string bytes_;
};

// Replaces every byte that does not start or continue a well-formed UTF-8
// sequence by U+FFFD.
std::string valid_utf8(const std::string& s);

}  // namespace fsdp
