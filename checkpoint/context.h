// What every save and load works on, passed as one object: the model's
// shape, the engine that holds its shards, the ops that stage them through
// the host, the ranks that write together, and how the bytes are moved.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "model/config.h"
#include "model/ops.h"
#include "shard/engine.h"

namespace fsdp {

struct CheckpointIoOptions {
  // MPI-IO before HDF5 1.12.3 breaks on calls of 2 GiB or more, so each rank's
  // part of a dataset is moved in collective calls of at most this many bytes.
  int64_t max_call_bytes = int64_t{1} << 30;
};

struct CheckpointIoStats {
  int64_t bytes = 0;             // tensor bytes this rank moved
  int data_calls = 0;            // collective H5Dwrite/H5Dread calls this rank made
  int not_collective_calls = 0;  // of those, how many HDF5 did not do collectively
  double seconds = 0;            // wall time of the whole save or load
};

struct CheckpointContext {
  const ModelConfig& model;
  FsdpEngine& engine;
  Ops& ops;
  // All ranks of the shard and replicate groups together: every function
  // taking a context is collective over it.
  MPI_Comm world;
  CheckpointIoOptions io = {};
};

}  // namespace fsdp
