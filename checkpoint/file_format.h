// The contents of a checkpoint file, internal to checkpoint/: metadata
// attributes (file_meta.cpp), the expected datasets of a model, and moving
// each rank's tensor slices (file_tensors.cpp). Callers hold fsdp::Hdf5Lock,
// except around write_tensors.
#pragma once

#include <hdf5.h>

#include <string>
#include <vector>

#include "checkpoint/context.h"
#include "checkpoint/meta.h"
#include "checkpoint/shard_source.h"

namespace fsdp::ckpt {

// The three tensor groups, in the order they are written.
constexpr const char* kGroups[] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

void write_meta(hid_t file, const CheckpointMeta& meta, const std::string& path);
// Reads and validates the metadata; throws "checkpoint 'path' is damaged:
// ..." naming the attribute for a value of the wrong type, out of range or
// inconsistent with the rest. The sampler's names are the caller's to check.
CheckpointMeta read_meta(hid_t file, const std::string& path);

// Why a checkpoint saved for `saved` cannot load into `running` (the flags
// that differ and what to pass), or "" when every weight-defining field agrees.
std::string model_mismatch(const ModelConfig& saved, const ModelConfig& running,
                           const std::string& path);

// Why `file`, whose /model fields match `model`, cannot be loaded (a missing,
// unexpected or differently shaped dataset: damage), or "" when it can.
std::string check_datasets(hid_t file, const ModelConfig& model, const std::string& path);

// Per-tensor checksums (checksum.h), in the order the tensors are moved.
struct Checksums {
  std::vector<std::string> names;  // "model/blocks.0.attn.wq", ...
  std::vector<uint64_t> sums;      // this rank's part until all-reduced
};
constexpr const char* kChecksumAttr = "tensor_checksums";

// Creates every dataset and writes this rank's slices from `shards`
// (collective). Replicas that hold a copy of a writer's shard take part with
// `writer` false, selecting nothing. Takes fsdp::Hdf5Lock itself, one
// dataset at a time, so that a data reader on another thread is held up by
// one write call at most, never by a whole save.
void write_tensors(hid_t file, const ModelConfig& model, ShardSource& shards,
                   const CheckpointIoOptions& io, bool writer, const std::string& path,
                   CheckpointIoStats* stats, Checksums* sums);
// Reads this rank's slices of every dataset into the engine (collective).
void read_tensors(hid_t file, const CheckpointContext& c, const std::string& path,
                  CheckpointIoStats* stats, Checksums* sums);

}  // namespace fsdp::ckpt
