// The model's parameters, grouped into the units the FSDP engine gathers one
// at a time: unit 0 = embedding, units 1..L = blocks, unit L+1 = final norm
// (+ untied head). Within a unit, parameters are laid out flat in this order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace fsdp {

// normal: N(0, std) samples; constant: every element `fill`.
enum class Init { normal, ones, zeros, constant };

// Each parameter starts at a multiple of this many elements of its flat unit
// (128 bytes in bf16), so every weight handed to a GEMM is 16-byte aligned
// whatever the shapes before it.
constexpr int64_t kParamAlign = 64;

struct ParamSpec {
  std::string name;  // e.g. "blocks.3.attn.wq" (the checkpoint's dataset name)
  // The logical shape: what checkpoints, exports and the optimizer see.
  std::vector<int64_t> shape;
  Init init = Init::normal;
  float std = 0.0f;
  float fill = 0.0f;  // Init::constant's value
  // Zero rows stored after the logical ones (the padded vocabulary of the
  // embedding and untied head); never initialised, updated or saved.
  int64_t pad_rows = 0;
  // A block linear's weight: under --precision fp8 its GEMMs run on E4M3
  // codes, which the weights' provider may hand over as such
  // (UnitAccess::weight_fp8).
  bool fp8 = false;
  // Stored right after the previous parameter, with no alignment gap, so the
  // two are one matrix: Wk and Wv after Wq, W3 after W1, which the model runs
  // as one GEMM each (q|k|v, and SwiGLU's two up-projections). Under FP8 such
  // a run also shares one scale (UnitAccess::weight_fp8).
  bool packed = false;

  int64_t numel() const;         // logical elements
  int64_t stored_numel() const;  // with the padding rows: what the model computes on
  // AdamW decays matrices only (embeddings and linear weights), not gains.
  bool decay() const { return shape.size() >= 2; }
};

struct UnitSpec {
  std::string name;
  std::vector<ParamSpec> params;
  // Elements of the flat unit: every parameter's stored_numel at its aligned
  // offset, gaps included (they stay zero).
  int64_t numel() const;
  int64_t offset_of(int param) const;  // element offset of a parameter in the flat unit
  // Elements from parameter `first`'s start to the end of parameter
  // first + count - 1, which must each be packed behind the one before: what
  // UnitAccess hands over for a run of packed parameters.
  int64_t span_numel(int first, int count) const;
};

// Where a parameter starts in its flat unit (or segment of one) when the one
// before it ends at `end`: kParamAlign-aligned, or at `end` when packed.
inline int64_t param_start(int64_t end, const ParamSpec& p) {
  return p.packed ? end : (end + kParamAlign - 1) / kParamAlign * kParamAlign;
}

// The model's units by kind: the embedding, one block (block 0's names:
// every block has its layout) repeated n_layer times, and the head. What
// counts, size checks and memory plans read, so that they cost the same for
// 2 layers or 100000 and no formula restates the layout.
struct ModelLayout {
  UnitSpec embed, block, head;
  int64_t n_layer = 0;
};
ModelLayout model_layout(const ModelConfig& c);

// Every unit in order: embedding, blocks 0 .. n_layer-1, head.
std::vector<UnitSpec> model_units(const ModelConfig& c);

// The model's fields (ModelConfig::validate_fields), then its size: more than
// 2^48 parameters is refused naming the flag that makes it so. Throws
// fsdp::Error; every configuration, from flags or a file, passes here.
void validate_model(const ModelConfig& c);

// Logical parameters (no padding rows), counted from the layout.
int64_t num_params(const ModelConfig& c);
// Parameters that take part in matmuls (for MFU): the blocks' linears and the
// head's matrix (the embedding's, when tied); no norm gains.
int64_t num_matmul_params(const ModelConfig& c);
// docs/ARCHITECTURE.md, "FLOPs and MFU": 6*N + 12*L*q_dim*T, forward plus backward.
double flops_per_token(const ModelConfig& c, int seq_len);

// Fills out[0, count) with elements [begin, begin + count) of the parameter's
// flattened initial value. Element i depends only on (seed, name, i), so any
// rank can initialise exactly the slice it owns and every world size starts
// from the same model.
void init_param_slice(const ParamSpec& p, uint64_t seed, int64_t begin, int64_t count, float* out);

}  // namespace fsdp
