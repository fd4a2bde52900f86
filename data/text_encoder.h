// Text to token ids with a token file's own tokenizer, for --prompt: so that a
// sample can start from words the user types, tokenized the way the training
// data was.
//
// tools/prepare_data.py writes the `text_encoder` attribute where the
// tokenizer is one this file reproduces exactly, and what it needs beside the
// decode table (data/token_decoder.h):
//   byte             each UTF-8 byte is its id;
//   gpt2-bpe-ranks   GPT-2's pre-tokenizer (data/gpt2_pretokenize.h), then
//                    byte-level BPE where a pair of adjacent pieces merges
//                    when their joined bytes are a token, the lowest id first
//                    (tiktoken's rule, whose ranks are the ids: tiktoken:gpt2,
//                    r50k_base, p50k_base);
//   gpt2-bpe-merges  the same pre-tokenizer, then the merges listed in
//                    /token_merges (int32 [n, 3]: left id, right id, merged
//                    id, in the order they apply), the Hugging Face rule (bpe,
//                    and hf: tokenizers that are GPT-2 style byte-level BPE).
// Other tokenizers (SentencePiece, cl100k_base's pattern, normalizers) have
// no attribute, and --prompt says so rather than guess. Text is text: the
// spelling of a special token ("<|endoftext|>") is encoded as its characters,
// as prepare_data.py encodes documents.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/token_decoder.h"
#include "data/tokenizer_match.h"

namespace fsdp {

class TextEncoder {
 public:
  // The encoder the file `id` names in its text_encoder attribute; nullopt,
  // with the reason in *why_not, when it names none. Throws fsdp::Error,
  // naming the file, for a name it does not know or tables that disagree.
  static std::optional<TextEncoder> open(const TokenizerId& id, std::optional<int> eos_id,
                                         std::string* why_not);

  // The ids of `text`. Throws fsdp::Error for text that is not UTF-8 or
  // that holds a byte no token spells.
  std::vector<int32_t> encode(std::string_view text) const;

 private:
  enum class Rule { bytes, ranks, merges };
  void bpe(std::string_view piece, std::vector<int32_t>* out) const;
  void bpe_by_merges(std::string_view piece, std::vector<int32_t>* out) const;

  Rule rule_ = Rule::bytes;
  std::array<int32_t, 256> byte_id_{};  // the token of each single byte, -1: none
  // ranks: a token's bytes -> its id (the lowest id, where two spell the same).
  std::unordered_map<std::string, int32_t> ids_;
  // merges: (left << 32 | right) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;
};

}  // namespace fsdp
