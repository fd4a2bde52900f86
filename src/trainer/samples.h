// Text samples from the current weights, as llm.c prints while it trains: on
// --sample-every's cadence, at the last step, and after --eval-only's loss.
// The prompts are made (and a wrong --prompt said) before the GPU is touched.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/token_decoder.h"
#include "data/token_stream.h"
#include "src/options/options.h"
#include "src/trainer/forward_pass.h"
#include "src/trainer/metrics.h"

namespace fsdp {

class Samples {
 public:
  // `data` gives the tokenizer the prompts are encoded in and the samples
  // decoded with. Throws fsdp::Error naming --prompt for text it cannot
  // encode or too long for --seq-len. Nothing when --samples is 0.
  Samples(const Options& o, const TokenStream& data, MetricsLog& metrics, bool lead);

  // Whether applied step `done` prints samples: --sample-every's period, or
  // the last step.
  bool due(int done, bool last) const;
  // The samples at `step`, printed and written to the metrics (rank 0).
  // Every rank runs the same forwards: the weights are gathered collectively.
  void print(int step, ForwardPass pass);

 private:
  const Options& o_;
  MetricsLog& metrics_;
  bool lead_;
  // What samples start from (src/trainer/sampling.h), on every rank: each
  // runs the same forwards, whose count the prompts' lengths set.
  std::vector<std::vector<int32_t>> prompts_;
  std::optional<TokenDecoder> decoder_;  // rank 0
  std::string decoder_note_;             // why there is none
};

}  // namespace fsdp
