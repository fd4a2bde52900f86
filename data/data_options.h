// What a run reads and how much per step: the token files, the sequence
// length and the batch. The tokens of one optimizer step are computed here
// and nowhere else (the loss scale, the tokens-seen count, the log's tok/s).
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

struct DataOptions {
  std::string train_data, val_data;  // "file.h5" or "file.h5:/dataset"
  int seq_len = 0;                   // 0: the model's max_seq_len
  int batch_size = 8;                // sequences per rank per micro-batch (0: auto)
  int grad_accum = 1;                // micro-batches per optimizer step

  // The global batch of `world_size` data-parallel ranks.
  int64_t sequences_per_step(int world_size) const {
    return int64_t(batch_size) * grad_accum * world_size;
  }
  int64_t tokens_per_step(int world_size) const { return sequences_per_step(world_size) * seq_len; }

  bool operator==(const DataOptions&) const = default;
};

}  // namespace fsdp
