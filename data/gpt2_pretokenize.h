// GPT-2's pre-tokenizer: text cut into the pieces that byte-level BPE then
// merges within, never across. The pieces are what this pattern finds, left
// to right, first alternative first:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (GPT-2's encoder.py; tiktoken's gpt2, r50k_base and p50k_base; Hugging Face
// ByteLevel with use_regex). Written out by hand rather than through a regex
// library: std::regex has no \p{L}, and the pattern is small.
#pragma once

#include <string_view>
#include <vector>

namespace fsdp {

// `text` must be valid UTF-8 (the caller checks); the pieces cover it in order.
std::vector<std::string_view> gpt2_pieces(std::string_view text);

}  // namespace fsdp
