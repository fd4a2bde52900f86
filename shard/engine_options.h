// What the FSDP engine is told: how it gathers, reduces and keeps weights.
// Apart from the engine's own header so that the option table (src/options/options.h)
// and the memory plan take it as it is, without the engine's interface.
#pragma once

#include <cstdint>

#include "common/dtype.h"

namespace fsdp {

struct EngineOptions {
  bool reshard_after_forward = true;  // re-gather for backward instead of keeping weights
  bool record_trace = false;          // keep an event log (tests check the prefetch order)
  bool check_finite = false;          // --debug: stop at the first unit that makes NaN/Inf
  // Drive the communicator's progress each time the model asks for a weight
  // or gradient, i.e. between ops, so in-flight collectives advance during
  // compute (MPI moves non-blocking collectives only inside MPI calls).
  bool progress_between_ops = true;
  // Element type of the full gradient buffers and of the reduce-scatter: f32
  // keeps the sum over ranks exact to fp32; bf16 halves the traffic.
  DType reduce_dtype = DType::f32;
  uint64_t seed = 0;  // parameter initialisation
  // A shard group of one rank holds whole units: the model then reads the
  // send copy in place and accumulates gradients straight into the f32
  // shards, with no gather, gradient buffers, reduce-scatter or accumulate
  // (reduce_dtype does not apply). Off only in tests that compare the paths.
  bool direct_when_unsharded = true;
  // When the model runs its block linears in FP8 (Transformer::fp8), gather
  // those weights as E4M3 codes: each rank casts its f32 slice with a scale
  // agreed across the shard group (one max all-reduce of the amaxes per
  // step), so the gather moves 1 byte per element. Off: the model casts the
  // gathered compute-dtype weight itself (tests compare the two).
  bool fp8_gather = true;

  bool operator==(const EngineOptions&) const = default;
};

}  // namespace fsdp
