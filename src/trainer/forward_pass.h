// What validation and samples run their forwards with: the model, the engine
// that gathers its weights, and the host buffers of one micro-batch of token
// ids that the training steps fill too (so neither needs memory of its own).
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "shard/engine.h"

namespace fsdp {

struct ForwardPass {
  Transformer& model;
  FsdpEngine& engine;
  std::vector<int32_t>& inputs;
  std::vector<int32_t>& targets;
};

}  // namespace fsdp
