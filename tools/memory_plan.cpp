// fsdp_memory_plan: one configuration's per-rank memory plan (plan_memory,
// shard/memory_plan.h), unit layouts (make_layout, shard/layout.h) and FLOP
// count (ModelConfig), as JSON on stdout, so tools/plan.py reports the
// program's own figures instead of a Python copy of them.
//
//   fsdp_memory_plan [--model gpt-1.3b] [--n-layer 32 ...] [--batch-size 8] [--seq-len 1024]
//                    [--shard-group-size 8] [--world-size 64] [--precision bf16|fp8]
//                    [--reshard-after-forward true] [--recompute none] [--reduce-dtype fp32]
//                    [--fp8-gather true] [--optimizer adamw|muon] [--muon-ns-steps 5]
//
// Every flag but --world-size is a row of fsdptrain's option table, converted
// and checked by that row as fsdptrain does. --world-size is what
// --shard-group-size 0 (all ranks) means here. --precision auto is bf16: the
// plan is for GPUs, where auto computes in bf16; fp8 computes in bf16 too,
// with the block linears on FP8 codes (and gathered as codes under
// --fp8-gather). Under --optimizer muon it adds Muon's buffers and, as
// "muon", the Newton-Schulz FLOPs of a step under plan_muon's owners and the
// units whose matrices are exchanged (shard/muon.h), for plan.py's timing.
#include "shard/memory_plan.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/params.h"
#include "shard/layout.h"
#include "shard/muon.h"
#include "src/options/option_table.h"
#include "src/options/option_values.h"
#include "src/options/options.h"

namespace fsdp {
namespace {

// The model's rows and these; flags about data, devices or the run are
// refused: the plan would ignore them, and whoever passes one expects an effect.
const char* const kPlanFlags[] = {
    "batch-size", "seq-len",      "shard-group-size",      "precision",
    "recompute",  "reduce-dtype", "reshard-after-forward", "fp8-gather",
    "optimizer",  "muon-ns-steps"};

bool accepted(const OptionRow& r) {
  if (r.model_field || r.name == "model") return true;
  for (const char* n : kPlanFlags)
    if (r.name == n) return true;
  return false;
}

Options parse(int argc, char** argv, int& world) {
  std::map<std::string, GivenValue> given;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag.rfind("--", 0) != 0 || i + 1 >= argc)
      throw_error("'", flag, "': every option is a --flag VALUE pair");
    const std::string name = flag.substr(2), value = argv[i + 1];
    if (name == "world-size") {
      if (!parse_value(value, world).empty() || world < 1)
        throw_error("--world-size: '", value, "' is invalid: must be at least 1");
      continue;
    }
    const OptionRow* r = find_option(name);
    if (!r || !accepted(*r)) throw_error("--", name, ": not an option of the memory plan");
    given[name] = {value, ""};
  }
  Options o = options_from_values(given);  // converted and checked as fsdptrain does
  const int shard = o.compute.shard_group_size == 0 ? world : o.compute.shard_group_size;
  if (world % shard != 0)
    throw_error("--shard-group-size ", shard, " does not divide --world-size ", world);
  o.compute.shard_group_size = shard;
  return o;
}

// fp8_shard: the elements per rank gathered as 1-byte FP8 codes (the rest in
// the compute dtype).
void print_layout(const char* name, int count, const UnitLayout& l, bool last) {
  int64_t fp8_shard = 0;
  for (const Segment& g : l.segments) fp8_shard += g.fp8 ? g.shard : 0;
  std::printf(
      "    {\"name\": \"%s\", \"count\": %d, \"numel\": %lld, \"padded\": %lld, "
      "\"shard\": %lld, \"fp8_shard\": %lld}%s\n",
      name, count, (long long)l.numel, (long long)l.padded, (long long)l.shard,
      (long long)fp8_shard, last ? "" : ",");
}

void print_json(const Options& o, int world) {
  const ModelConfig& m = o.model;
  const DType compute = o.compute.precision == Precision::fp32 ? DType::f32 : DType::bf16;
  const int shard = o.compute.shard_group_size;
  const DataOptions& d = o.data;
  const bool split = o.compute.fp8() && o.engine.fp8_gather;  // as the engine lays units out
  const MemoryPlan p = plan_memory(m, {.shard_size = shard,
                                       .compute = compute,
                                       .batch = d.batch_size,
                                       .seq_len = d.seq_len,
                                       .recompute = o.compute.recompute,
                                       .fp8 = o.compute.fp8(),
                                       .engine = o.engine,
                                       .optimizer = o.optimizer.kind,
                                       .normuon = o.optimizer.muon.normuon});
  // Units come as embedding, n_layer blocks of one layout, head (model_units).
  const std::vector<UnitSpec> units = model_units(m);
  std::printf(
      "{\n  \"model\": {\"name\": \"%s\", \"vocab_size\": %d, \"padded_vocab\": %d, "
      "\"n_layer\": %d, \"d_model\": %d, \"n_head\": %d, \"n_kv_head\": %d, "
      "\"d_ff\": %d, \"max_seq_len\": %d, \"tie_embeddings\": %s},\n",
      m.name.c_str(), m.vocab_size, m.padded_vocab(), m.n_layer, m.d_model, m.n_head, m.n_kv_head,
      m.d_ff, m.max_seq_len, m.tie_embeddings ? "true" : "false");
  std::printf(
      "  \"num_params\": %lld,\n  \"num_matmul_params\": %lld,\n"
      "  \"flops_per_token\": %.17g,\n",
      (long long)num_params(m), (long long)num_matmul_params(m), flops_per_token(m, d.seq_len));
  std::printf(
      "  \"world_size\": %d,\n  \"shard_size\": %d,\n  \"batch_size\": %d,\n"
      "  \"seq_len\": %d,\n  \"compute_dtype\": \"%s\",\n  \"reduce_dtype\": \"%s\",\n"
      "  \"reshard_after_forward\": %s,\n  \"recompute\": \"%s\",\n"
      "  \"fp8\": %s,\n  \"fp8_gather\": %s,\n",
      world, shard, d.batch_size, d.seq_len, dtype_name(compute), dtype_name(o.engine.reduce_dtype),
      o.engine.reshard_after_forward ? "true" : "false", format_value(o.compute.recompute).c_str(),
      o.compute.fp8() ? "true" : "false", split ? "true" : "false");
  if (o.optimizer.kind == OptimizerKind::muon) {
    const MuonCost c = muon_cost(units, shard, o.optimizer.muon);
    std::printf(
        "  \"optimizer\": \"muon\",\n  \"muon\": {\"ns_steps\": %d, \"matrices\": %lld, "
        "\"exchanged_units\": %d, \"ns_flops\": %.17g, \"ns_critical_flops\": %.17g, "
        "\"ns_critical_elems\": %lld},\n",
        o.optimizer.muon.ns_steps, (long long)c.matrices, c.exchanged_units, c.total_flops,
        c.critical_flops, (long long)c.critical_elems);
  } else {
    std::printf("  \"optimizer\": \"adamw\",\n  \"muon\": null,\n");
  }
  std::printf("  \"units\": [\n");
  print_layout("embed", 1, make_layout(units.front(), shard, split), false);
  print_layout("block", m.n_layer, make_layout(units[1], shard, split), false);
  print_layout("head", 1, make_layout(units.back(), shard, split), true);
  std::printf("  ],\n");
  std::printf(
      "  \"memory\": {\"master\": %lld, \"grads\": %lld, \"moments\": %lld, "
      "\"send_copy\": %lld, \"gather_buffers\": %lld, \"grad_buffers\": %lld, "
      "\"optimizer_buffers\": %lld, "
      "\"activations\": %lld, \"persistent\": %lld, \"buffers\": %lld, \"total\": %lld}\n}\n",
      (long long)p.master, (long long)p.grads, (long long)p.moments, (long long)p.send_copy,
      (long long)p.gather_buffers, (long long)p.grad_buffers, (long long)p.optimizer_buffers,
      (long long)p.activations, (long long)p.persistent(), (long long)p.buffers(),
      (long long)p.total());
}

}  // namespace
}  // namespace fsdp

int main(int argc, char** argv) {
  try {
    int world = 1;
    const fsdp::Options o = fsdp::parse(argc, argv, world);
    fsdp::print_json(o, world);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdp_memory_plan: error: %s\n", e.what());
    return 2;
  }
}
