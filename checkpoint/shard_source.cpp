#include "checkpoint/shard_source.h"

#include <iterator>

#include "checkpoint/collective.h"
#include "checkpoint/file_format.h"
#include "common/error.h"

namespace fsdp {

namespace {

// Unit u's shard of group g in `host` (l.shard floats): tensors may live on a
// GPU, and padding elements past the last parameter must read as zero.
void copy_shard(const CheckpointContext& c, int u, int g, float* host) {
  const Tensor shard = engine_shard(c.engine, u, g);
  FSDP_CHECK(shard.dtype == DType::f32 && shard.numel == c.engine.layout(u).shard);
  c.ops.to_host(host, shard);
}

}  // namespace

Tensor engine_shard(const FsdpEngine& engine, int unit, int group) {
  using Getter = Tensor (FsdpEngine::*)(int) const;
  constexpr Getter getters[] = {&FsdpEngine::master, &FsdpEngine::exp_avg, &FsdpEngine::exp_avg_sq};
  static_assert(std::size(getters) == std::size(ckpt::kGroups));
  FSDP_CHECK(group >= 0 && group < int(std::size(getters)), "group ", group);
  return (engine.*getters[group])(unit);
}

int EngineShards::num_units() const {
  return c_.engine.num_units();
}
const UnitLayout& EngineShards::layout(int unit) const {
  return c_.engine.layout(unit);
}
int EngineShards::shard_rank() const {
  return c_.engine.shard_rank();
}
int EngineShards::shard_group_size() const {
  return ckpt::shard_group_size(c_.engine);
}
int EngineShards::optimizer_steps() const {
  return c_.engine.optimizer_steps();
}

const float* EngineShards::shard(int unit, int group) {
  host_.resize(size_t(layout(unit).shard));
  copy_shard(c_, unit, group, host_.data());
  return host_.data();
}

void ShardSnapshot::take(const CheckpointContext& c) {
  const FsdpEngine& e = c.engine;
  const size_t groups = std::size(ckpt::kGroups);
  layouts_.resize(size_t(e.num_units()));
  shards_.resize(layouts_.size() * groups);
  for (int u = 0; u < e.num_units(); ++u) {
    layouts_[size_t(u)] = e.layout(u);
    for (size_t g = 0; g < groups; ++g) {
      std::vector<float>& host = shards_[size_t(u) * groups + g];
      host.resize(size_t(e.layout(u).shard));
      copy_shard(c, u, int(g), host.data());
    }
  }
  shard_rank_ = e.shard_rank();
  shard_group_size_ = ckpt::shard_group_size(e);
  optimizer_steps_ = e.optimizer_steps();
}

int64_t ShardSnapshot::bytes() const {
  int64_t n = 0;
  for (const auto& s : shards_) n += int64_t(s.size() * sizeof(float));
  return n;
}

const float* ShardSnapshot::shard(int unit, int group) {
  return shards_[size_t(unit) * std::size(ckpt::kGroups) + size_t(group)].data();
}

}  // namespace fsdp
