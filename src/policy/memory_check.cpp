#include "src/policy/memory_check.h"

#include <cstdio>
#include <vector>

#include "common/error.h"

namespace fsdp {

namespace {

std::string gib(long double bytes) {
  char s[32];
  std::snprintf(s, sizeof s, "%.2Lf GiB", bytes / (1 << 30));
  return s;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i)
    out += (i == 0 ? "" : i + 1 == items.size() ? " or " : ", ") + items[i];
  return out;
}

}  // namespace

std::string memory_shortfall(const MemoryPlan& plan, int64_t free_bytes, const std::string& memory,
                             const MemorySettings& s) {
  // long double: plan.total() may be near kPlanSaturation, times the ranks.
  const long double need = static_cast<long double>(plan.total()) * s.ranks_sharing;
  const long double usable = kUsableShare * static_cast<long double>(free_bytes);
  if (need <= usable) return "";

  std::string message = "the memory plan needs " + gib(plan.total()) + " per rank";
  if (s.ranks_sharing > 1)
    message += ", " + gib(need) + " for the " + std::to_string(s.ranks_sharing) +
               " ranks that share this node's memory";
  message +=
      " (this rank's share of the model state " + gib(plan.persistent()) +
      (s.shard_size > 1 ? ", sharded " + std::to_string(s.shard_size) + " ways" : ", not sharded") +
      "; gathered units " + gib(plan.buffers()) + "; activations " + gib(plan.activations) +
      "), but " + memory + " has " + gib(free_bytes) + " free, of which a run may plan " +
      std::to_string(int(kUsableShare * 100)) + "% (" + gib(usable) + "); ";

  // Advice for the larger part first: activations shrink with recomputation
  // and smaller micro-batches, model state with more ranks to shard over.
  std::vector<std::string> activations, state;
  if (s.trains && s.recompute == Recompute::none) activations.push_back("--recompute mlp|block");
  if (s.trains && s.recompute == Recompute::mlp) activations.push_back("--recompute block");
  if (s.batch_size > 1)
    activations.push_back("a smaller --batch-size (now " + std::to_string(s.batch_size) +
                          (s.trains ? ", with more --grad-accum for the same global batch)" : ")"));
  if (s.shard_size < s.world_size)
    state.push_back("a larger --shard-group-size (now " + std::to_string(s.shard_size) + " of " +
                    std::to_string(s.world_size) + " ranks)");
  state.push_back(s.node_shared ? "ranks on more nodes" : "more ranks");
  const bool activations_dominate = plan.activations > plan.persistent() + plan.buffers();
  std::vector<std::string> advice = activations_dominate ? activations : state;
  const std::vector<std::string>& rest = activations_dominate ? state : activations;
  advice.insert(advice.end(), rest.begin(), rest.end());
  advice.push_back("a smaller model");
  return message + "use " + join(advice);
}

namespace {
// On a GPU each rank has its own device; on the host a node's ranks share.
MemorySettings as_seen_by(const Ops& ops, MemorySettings settings) {
  const bool host = ops.capabilities().host_memory;
  if (!host) settings.ranks_sharing = 1;
  settings.node_shared = host;
  return settings;
}
}  // namespace

int auto_batch_size(const std::function<MemoryPlan(int)>& plan_for, const Ops& ops,
                    MemorySettings settings) {
  return largest_batch_that_fits(plan_for, ops.free_memory_bytes(), as_seen_by(ops, settings));
}

void check_memory_fits(const MemoryPlan& plan, const Ops& ops, MemorySettings settings) {
  const bool host = ops.capabilities().host_memory;
  settings = as_seen_by(ops, settings);
  const std::string message = memory_shortfall(
      plan, ops.free_memory_bytes(),
      host ? "host memory (MemAvailable, or the cgroup limit if lower)" : "GPU memory", settings);
  if (!message.empty()) throw Error(message);
}

}  // namespace fsdp
