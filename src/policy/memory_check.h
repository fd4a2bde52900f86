// Before anything sized by the model is allocated, the per-rank memory plan
// (shard/memory_plan.h) is compared with what the device has free, so a run
// that cannot fit stops within a second with both numbers and what to change,
// instead of a bare std::bad_alloc, or minutes of swapping, or the OOM killer.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "model/ops.h"
#include "model/transformer.h"
#include "shard/memory_plan.h"

namespace fsdp {

// The plan may use this share of what is free. The plan counts the tensors
// the model and engine allocate, not what comes beside them: the allocator's
// rounding and fragmentation, the program and its libraries, MPI's and HDF5's
// buffers, the data loader's prefetched steps, on a GPU the CUDA context,
// cuBLASLt/cuDNN workspaces and Muon's bf16 Newton-Schulz iterates (tens of
// MB at gpt-350m); and on the host, other processes' needs grow
// while this one starts. (Measured on the CPU: tests/src/input_checks_test.py.)
inline constexpr double kUsableShare = 0.9;

// What the run could change, for the advice in the message.
struct MemorySettings {
  int ranks_sharing = 1;  // ranks that draw on the same memory (a node's, on the host)
  int shard_size = 1;     // ranks the model state is sharded over
  int world_size = 1;
  int batch_size = 1;
  Recompute recompute = Recompute::none;
  // false for --eval-only: nothing is recomputed and no step accumulates,
  // so neither is advised
  bool trains = true;
  // The host's memory: more ranks on the same node add gathered buffers and
  // activations without adding memory, so only more nodes help.
  bool node_shared = false;
};

// "" when ranks_sharing x plan.total() fits in kUsableShare of free_bytes;
// otherwise the error message (one line, without "fsdptrain: error: ") with
// both numbers, what dominates the plan and what to change. `memory` names
// what was measured, e.g. "host memory" or "GPU memory".
std::string memory_shortfall(const MemoryPlan& plan, int64_t free_bytes, const std::string& memory,
                             const MemorySettings& settings);

// Asks `ops` what is free and throws fsdp::Error with memory_shortfall's
// message. Rank-local (free memory differs by node); run it in all_or_none.
void check_memory_fits(const MemoryPlan& plan, const Ops& ops, MemorySettings settings);

// --batch-size 0: the largest micro-batch, at most kMaxAutoBatch, whose plan
// (plan_for(b)) memory_shortfall accepts in free_bytes; 0 when not even one
// sequence fits. The plan grows with b, so a binary search finds it.
inline constexpr int kMaxAutoBatch = 1024;
// The same for this rank's memory as check_memory_fits sees it.
int auto_batch_size(const std::function<MemoryPlan(int)>& plan_for, const Ops& ops,
                    MemorySettings settings);
template <typename PlanFor>
int largest_batch_that_fits(PlanFor plan_for, int64_t free_bytes, MemorySettings settings) {
  auto fits = [&](int b) {
    settings.batch_size = b;
    return memory_shortfall(plan_for(b), free_bytes, "", settings).empty();
  };
  if (!fits(1)) return 0;
  int lo = 1, hi = kMaxAutoBatch;  // fits(lo) holds; find the last b that fits
  if (fits(hi)) return hi;
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace fsdp
