// What a sample starts from and how its tokens are chosen. The prompts: each
// --prompt in the data's own tokenizer (data/text_encoder.h). The next token:
// greedy at temperature 0, else a draw from softmax(logits / temperature)
// over the top_k largest (0: all). Pure host code, so the CPU tests pin it.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "data/token_stream.h"

namespace fsdp {

// Ties and NaN logits resolve to the lowest index, so a run is reproducible.
int32_t pick_token(const std::vector<float>& logits, float temperature, int top_k,
                   std::mt19937_64& rng);

// The prompts samples start from, as token ids. Each of `texts` (--prompt)
// follows the end-of-text token where `data` has one (a fresh document, as in
// training). Without texts: that token alone, or where there is none, the
// data's first min(8, seq_len / 4) tokens. Throws fsdp::Error naming --prompt
// for text the data's tokenizer cannot encode here, or too long to leave
// room for one new token within seq_len.
std::vector<std::vector<int32_t>> sample_prompts(const std::vector<std::string>& texts,
                                                 const TokenStream& data, int seq_len);

}  // namespace fsdp
