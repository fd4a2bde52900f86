// Where a save's tensors come from. A save writes this rank's shards of
// every unit's masters and two moments; it reads them through a ShardSource,
// so that the same write serves two cases:
// - EngineShards: straight from the engine, staged through the host one
//   unit at a time (a save that the training loop waits for);
// - ShardSnapshot: host copies of all of them taken at one step, which a
//   background thread writes while the engine trains on (--async-checkpoint,
//   checkpoint/background_save.h). It never touches the engine after the copy.
#pragma once

#include <cstdint>
#include <vector>

#include "checkpoint/context.h"
#include "shard/layout.h"

namespace fsdp {

// The engine's shard of unit `unit` in group `group` (0 masters, 1 and 2
// the two moments, in ckpt::kGroups' order): what a save writes and a load
// fills.
Tensor engine_shard(const FsdpEngine& engine, int unit, int group);

class ShardSource {
 public:
  virtual ~ShardSource() = default;
  virtual int num_units() const = 0;
  virtual const UnitLayout& layout(int unit) const = 0;
  virtual int shard_rank() const = 0;        // this rank's place in its shard group
  virtual int shard_group_size() const = 0;  // ranks over which each unit is split
  virtual int optimizer_steps() const = 0;   // the optimizer's step count
  // Unit `unit`'s shard of group `group` (0 masters, 1 and 2 the moments;
  // ckpt::kGroups), layout(unit).shard floats, padding zero. Valid until
  // the next call.
  virtual const float* shard(int unit, int group) = 0;
};

// The engine's own shards; copies one at a time into a buffer it owns.
class EngineShards final : public ShardSource {
 public:
  explicit EngineShards(const CheckpointContext& c) : c_(c) {}
  int num_units() const override;
  const UnitLayout& layout(int unit) const override;
  int shard_rank() const override;
  int shard_group_size() const override;
  int optimizer_steps() const override;
  const float* shard(int unit, int group) override;

 private:
  const CheckpointContext& c_;
  std::vector<float> host_;
};

// Every shard of this rank copied to host memory at once.
class ShardSnapshot final : public ShardSource {
 public:
  // Copies the engine's state now; reuses the buffers of an earlier take,
  // so the host memory of repeated saves is allocated once. Only this call
  // touches the engine (and its device).
  void take(const CheckpointContext& c);
  int64_t bytes() const;  // host bytes the copy holds

  int num_units() const override { return int(layouts_.size()); }
  const UnitLayout& layout(int unit) const override { return layouts_[size_t(unit)]; }
  int shard_rank() const override { return shard_rank_; }
  int shard_group_size() const override { return shard_group_size_; }
  int optimizer_steps() const override { return optimizer_steps_; }
  const float* shard(int unit, int group) override;

 private:
  std::vector<UnitLayout> layouts_;
  std::vector<std::vector<float>> shards_;  // [unit * 3 + group]
  int shard_rank_ = 0, shard_group_size_ = 0, optimizer_steps_ = 0;
};

}  // namespace fsdp
