// The FSDP engine: owns each rank's slice of every unit's fp32 master weights,
// AdamW moments and fp32 gradients, gathers a unit's full weights just before
// it computes (prefetching the next one), reduce-scatters its gradients just
// after, and runs the sharded optimizer step. It moves bytes; the Transformer
// decides what a unit computes. For a forward-only model (--eval-only) it
// holds the master weights alone: no moments, gradients or gradient buffers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/ops.h"
#include "model/transformer.h"
#include "shard/engine_options.h"
#include "shard/layout.h"
#include "shard/muon.h"
#include "shard/optimizer_config.h"

namespace fsdp {

// The global gradient norm of one step and each unit's share of it, so a
// non-finite norm can be traced to the units that produced it.
struct GradientNorms {
  double total = 0;
  std::vector<double> unit;  // per unit, the same order as Transformer::units()
  // This rank's own share of the computation, before any reduction mixed
  // it with its peers': per unit, the sum of squares of the gradient it
  // computed (summed over micro-batches). A rerun of the step that gives
  // another value names this rank (src/trainer/trainer_rerun.cpp). Empty under
  // --reduce-dtype bf16, whose low-precision buffers it does not read.
  std::vector<float> local;
  bool finite() const;
  // Names of the units whose gradient norm is not finite.
  std::vector<std::string> nonfinite_units(const Transformer& model) const;
};

class FsdpEngine final : public UnitAccess {
 public:
  // shard: the group the parameters are split over. replicate: the group of
  // ranks holding the same shard (hybrid sharding), or nullptr. Both move
  // buffers where ops computes (NCCL on a GPU). shard_host: the same ranks as
  // shard on host memory, for the one scalar of the gradient norm; nullptr
  // when shard itself works on host memory.
  FsdpEngine(Transformer& model, Ops& ops, Communicator& shard, Communicator* replicate,
             const EngineOptions& options, Communicator* shard_host = nullptr);
  ~FsdpEngine() override;

  // One micro-batch (already given to the model with set_batch): forward and
  // backward through every unit; gradients are added into the fp32 shards.
  // last_of_step: no micro-batch of this step follows, so a unit's gradient
  // shard is final once its reduce-scatter lands, and its all-reduce across
  // replicas (hybrid sharding) starts right then, under the rest of the
  // backward, as HSDP does. Otherwise those all-reduces wait for
  // measure_gradients(), which is always correct but exposes them.
  void forward_backward(bool last_of_step = false);
  // Forward only, for evaluation; the loss is in the model afterwards.
  void forward_only();
  // After the last micro-batch of a step, in two halves so the caller can
  // look at the gradients before they change any weight (a non-finite or
  // outlier step is then refused or skipped, never applied):
  // measure_gradients() all-reduces across replicas and returns the global
  // L2 norm of the gradients (collective; NaN/Inf when any element is);
  // apply_update() clips by that norm, runs the optimizer (AdamW, or Muon
  // for the block matrices: shard/muon.h) and zeroes the gradients.
  // Skipping a step instead is discard_gradients().
  GradientNorms measure_gradients();
  void apply_update(const OptimizerConfig& config, float lr, const GradientNorms& norms);
  // Both halves in one call; returns the norm before clipping.
  double step(const OptimizerConfig& config, float lr);
  // Whether every rank's master weights are finite (collective over the
  // shard group): checked before a checkpoint is written or trained from.
  bool masters_finite();
  // Drops the gradients of the micro-batches since the last step, as if they
  // had never run: after a warm-up pass whose only purpose was to build
  // plans and connections.
  void discard_gradients();

  using UnitAccess::grad;
  using UnitAccess::weight;
  using UnitAccess::weight_fp8;
  Tensor weight(int unit, int param, int count) override;
  Fp8Tensor weight_fp8(int unit, int param, int count) override;
  Tensor grad(int unit, int param, int count) override;
  // Whether block linears are gathered as FP8 codes (EngineOptions::fp8_gather).
  bool fp8_gather() const { return fp8_; }

  int num_units() const { return int(units_.size()); }
  const Transformer& model() const { return model_; }
  const UnitLayout& layout(int unit) const { return units_[unit].layout; }
  int shard_rank() const { return shard_.rank(); }
  // This rank's fp32 slices (for checkpoints and tests).
  Tensor master(int unit) const { return units_[unit].master; }
  // AdamW's first moment; for Muon's matrices, Muon's momentum buffer. The
  // moments and gradients are empty tensors when !trains().
  Tensor exp_avg(int unit) const { return units_[unit].exp_avg; }
  Tensor exp_avg_sq(int unit) const { return units_[unit].exp_avg_sq; }
  Tensor grad_shard(int unit) const { return units_[unit].grad; }
  int optimizer_steps() const { return steps_; }
  void set_optimizer_steps(int n) { steps_ = n; }
  // Re-derives the all-gather source from the masters (after loading them).
  // Collective over the shard group when gathering FP8 codes (their scales).
  void refresh_send_buffers();

  // Bytes this rank holds for the whole run: masters, moments, gradients,
  // low-precision send copies (and FP8 scales).
  int64_t persistent_bytes() const { return persistent_bytes_; }
  // Bytes of gather, gradient and reduce-scatter buffers (and Muon's, from
  // its first step on).
  int64_t buffer_bytes() const { return buffer_bytes_; }
  const std::vector<std::string>& trace() const { return trace_; }
  // Whether this engine runs unsharded in place (direct_when_unsharded).
  bool direct() const { return direct_; }
  // Whether its model trains (ModelUse::train): else forward_only() alone.
  bool trains() const { return trains_; }
  // Time compute stood waiting for collectives since the last call (or
  // discard_timing): stream time on a GPU, host time on the CPU. Reads marks
  // of ops (Ops::mark), so call it before ops.clear_marks().
  double take_comm_wait_seconds();
  void discard_timing() { wait_spans_.clear(); }

 private:
  struct Unit {
    UnitLayout layout;
    Tensor master, exp_avg, exp_avg_sq, grad;  // f32 shards
    // Per segment, what its all-gather sends: the master slice itself, its
    // compute-dtype copy, or E4M3 codes; owned: allocated here (not a slice).
    std::vector<Tensor> send;
    std::vector<bool> owned;
    // Per parameter: its matrix's slot in amax_/scale_inv_ (shared by a packed
    // run), or -1.
    std::vector<int> fp8_index;
    int slot = 0;
    WorkHandle gather;          // in flight while non-null
    WorkHandle replica_reduce;  // all-reduce of `grad` across replicas in flight
    bool ready = false;
    bool grad_active = false;
  };
  struct Slot {
    std::vector<Tensor> full;  // per segment, in its gather dtype
    Tensor grad_full, rs_out;
    int weight_owner = -1, grad_owner = -1;
    WorkHandle reduce;        // reduce-scatter of grad_owner in flight
    bool into_shard = false;  // it writes the f32 shard itself (no accumulate after)
  };

  DType gather_dtype(const Segment& g) const { return g.fp8 ? DType::u8 : ct_; }
  // Elements of the packed run of `count` parameters from `param` (one segment).
  int64_t span(int unit, int param, int count) const;
  void refresh_fp8_codes();
  void issue_gather(int unit);
  void wait_gather(int unit);
  void release(int unit);
  void begin_grads(int unit);
  void issue_reduce(int unit);
  void finish_reduce(Slot& s);
  void issue_replica_reduce(int unit);
  void take_local_sum(int unit, Tensor local);  // into GradientNorms::local
  void finish_replica_reduces(bool issue_missing);
  void progress();
  void timed_wait(Work& w);
  void note(const std::string& event, int unit);
  void check_finite(int unit, bool backward);
  // Refuses a training entry point (named `what`) when !trains_.
  void require_training(const char* what) const;

  Transformer& model_;
  Ops& ops_;
  Communicator& shard_;
  Communicator* replicate_;
  Communicator& shard_host_;
  EngineOptions opt_;
  DType ct_, rt_;  // compute and reduce dtypes
  bool direct_;    // one rank holds whole units: no gather, no reduce-scatter
  bool fp8_;       // block linears gathered as FP8 codes
  bool trains_;    // the model trains: moments, gradients and their buffers exist
  // f32 per FP8-gathered matrix of every unit: the amax of its master
  // (agreed over the shard group) and the inverse scale of its codes.
  Tensor amax_, scale_inv_;
  std::vector<Unit> units_;
  std::vector<Slot> slots_;
  // f32, two per unit: each one's share of the gradient norm, then this
  // rank's local gradient sums (GradientNorms::local), read in one copy.
  Tensor norm_sums_;
  Tensor local_sum_;                // f32 per unit: one micro-batch's local sum, before it is added
  std::unique_ptr<MuonStep> muon_;  // made by the first Muon step
  int steps_ = 0;
  int micro_batch_ = 0;                          // within the current step, for --debug's messages
  int in_flight_ = 0;                            // collectives posted and not yet waited
  int replicas_in_flight_ = 0;                   // of them, all-reduces across replicas
  bool last_of_step_ = false;                    // forward_backward(true) is running
  std::vector<std::pair<int, int>> wait_spans_;  // Ops marks around each wait
  int64_t persistent_bytes_ = 0, buffer_bytes_ = 0;
  std::vector<std::string> trace_;
};

}  // namespace fsdp
