// Drives the FSDP engine on the CPU with synthetic token batches, so engine
// tests need no files: step s's global sequence j is a fixed function of
// (s, j), and the set of sequences in a step does not depend on the split.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/cpu/cpu_ops.h"
#include "model/transformer.h"
#include "shard/engine.h"

namespace fsdp::testing {

inline ModelConfig engine_test_config() {
  ModelConfig c = model_preset("tiny");
  c.vocab_size = 61;  // odd sizes make every unit's padding uneven
  c.d_model = 24;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.d_ff = 40;
  c.n_layer = 3;
  c.max_seq_len = 16;
  return c;
}

// The relative L2 difference of a from b (the equivalence tests' measure).
inline double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

inline int32_t synthetic_token(int step, int64_t seq, int t, int vocab) {
  uint64_t x = uint64_t(step) * 1000003u + uint64_t(seq) * 7919u + uint64_t(t) * 104729u;
  x ^= x >> 17;
  x *= 0xed5ad4bbu;
  x ^= x >> 11;
  // A learnable pattern (next token = previous + 1 half the time) plus noise.
  return int32_t((t % 2 ? (seq + t) : x) % uint64_t(vocab));
}

struct EngineRun {
  ModelConfig cfg;
  CpuOps ops;
  Transformer model;
  FsdpEngine engine;
  int B, T, accum, rank, world;
  std::vector<double> losses;
  // Start the all-reduce across replicas during the last micro-batch's
  // backward, as the trainer does (false: all of it in measure_gradients).
  bool overlap_replicas = true;

  // fp8: the model's block linears on FP8 codes (--precision fp8). use:
  // forward_only builds what --eval-only does (no gradients or moments).
  EngineRun(const ModelConfig& c, Communicator& shard, Communicator* replicate, int dp_rank,
            int dp_world, int batch, int seq, int grad_accum, EngineOptions eo = {},
            bool fp8 = false, ModelUse use = ModelUse::train)
      : cfg(c),
        model(c, ops, batch, seq, Recompute::none, fp8, 0, use),
        engine(model, ops, shard, replicate, eo),
        B(batch),
        T(seq),
        accum(grad_accum),
        rank(dp_rank),
        world(dp_world) {}

  // The optimizer settings of every engine test: clipping low enough that it
  // really happens.
  static OptimizerConfig adam() {
    OptimizerConfig o;
    o.adamw.weight_decay = 0.1f;
    o.adamw.grad_clip = 0.5f;
    return o;
  }
  // What step() runs: adam(), or the same with kind = muon.
  OptimizerConfig optimizer = adam();

  // Step s's micro-batches, forward and backward, gradients left in the
  // engine; returns the global mean loss (also appended to `losses`).
  double forward_backward(int s, Communicator& world_comm) {
    const int64_t G = int64_t(B) * accum * world;
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
    double local = 0;
    for (int m = 0; m < accum; ++m) {
      for (int b = 0; b < B; ++b) {
        const int64_t j = (int64_t(m) * world + rank) * B + b;
        for (int t = 0; t < T; ++t) {
          in[size_t(b) * T + t] = synthetic_token(s, j, t, cfg.vocab_size);
          tgt[size_t(b) * T + t] = synthetic_token(s, j, t + 1, cfg.vocab_size);
        }
      }
      model.set_batch(in.data(), tgt.data(), float(1.0 / double(G * T)));
      engine.forward_backward(overlap_replicas && m + 1 == accum);
      local += model.loss_sum();
    }
    float v = float(local);
    world_comm.all_reduce(&v, 1, DType::f32, ReduceOp::sum)->wait();
    losses.push_back(double(v) / double(G * T));
    return losses.back();
  }

  // Step s's micro-batch 0 forward only (as --eval-only runs it); returns
  // the global mean loss.
  double forward_only(int s, Communicator& world_comm) {
    std::vector<int32_t> in(size_t(B) * T), tgt(in.size());
    for (int b = 0; b < B; ++b) {
      const int64_t j = int64_t(rank) * B + b;
      for (int t = 0; t < T; ++t) {
        in[size_t(b) * T + t] = synthetic_token(s, j, t, cfg.vocab_size);
        tgt[size_t(b) * T + t] = synthetic_token(s, j, t + 1, cfg.vocab_size);
      }
    }
    model.set_batch(in.data(), tgt.data(), 0.0f);
    engine.forward_only();
    float v = float(model.loss_sum());
    world_comm.all_reduce(&v, 1, DType::f32, ReduceOp::sum)->wait();
    return double(v) / double(int64_t(B) * world * T);
  }

  // One optimizer step; returns the global mean loss. lr 1e-3: at 1e-2 Adam
  // amplifies the rounding of a different summation order (~1e-7) to a
  // parameter difference of 1.6e-5 over 20 steps (measured, 3 ranks); at 1e-3
  // it stays ~1e-7, so a 1e-5 bar separates rounding from any sharding bug.
  double step(int s, Communicator& world_comm, float lr = 1e-3f) {
    const double loss = forward_backward(s, world_comm);
    engine.step(optimizer, lr);
    return loss;
  }

  // The full flat master weights of unit u, gathered from the shard group
  // segment by segment (UnitLayout::offsets index the result).
  std::vector<float> full_master(int u, Communicator& shard) {
    const UnitLayout& l = engine.layout(u);
    std::vector<float> out(size_t(l.padded));
    for (const Segment& g : l.segments)
      shard
          .all_gather(engine.master(u).f32() + g.local, out.data() + g.begin, size_t(g.shard),
                      DType::f32)
          ->wait();
    out.resize(size_t(l.numel));
    return out;
  }
};

}  // namespace fsdp::testing
