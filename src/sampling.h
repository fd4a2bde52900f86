// Choosing the next token of a sample from the model's logits: greedy at
// temperature 0, else a draw from softmax(logits / temperature) over the
// top_k largest (0: all). Pure arithmetic on the host, so the CPU tests pin it.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace fsdp {

// Ties and NaN logits resolve to the lowest index, so a run is reproducible.
int32_t pick_token(const std::vector<float>& logits, float temperature, int top_k,
                   std::mt19937_64& rng);

}  // namespace fsdp
