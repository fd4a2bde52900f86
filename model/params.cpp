#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "common/mix64.h"

namespace fsdp {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t ParamSpec::stored_numel() const {
  return shape.empty() ? 1 : numel() / shape[0] * (shape[0] + pad_rows);
}

int64_t UnitSpec::numel() const {
  return params.empty() ? 0 : offset_of(int(params.size()) - 1) + params.back().stored_numel();
}

int64_t UnitSpec::offset_of(int param) const {
  int64_t end = 0;
  for (int i = 0; i < param; ++i) end = param_start(end, params[i]) + params[i].stored_numel();
  return param_start(end, params[size_t(param)]);
}

int64_t UnitSpec::span_numel(int first, int count) const {
  FSDP_CHECK(count >= 1 && first >= 0 && first + count <= int(params.size()), "parameters ", first,
             "+", count, " of unit ", name);
  for (int p = first + 1; p < first + count; ++p)
    FSDP_CHECK(params[size_t(p)].packed, "unit ", name, ": ", params[size_t(p)].name,
               " is not packed behind ", params[size_t(p) - 1].name);
  const int last = first + count - 1;
  return offset_of(last) + params[size_t(last)].stored_numel() - offset_of(first);
}

namespace {

// The one place that says which parameters the model has, their shapes and
// their order: every unit, count, size check and memory plan comes from here.
ModelLayout layout_of(const ModelConfig& c, int layer) {
  const int64_t d = c.d_model, hd = c.head_dim(), ff = c.d_ff;
  const float std = c.init_std;
  // Output projections of each residual branch start smaller so the residual
  // stream's variance does not grow with depth (GPT-2's 1/sqrt(2L) scaling).
  // --zero-init-out: none at all, each block starting as the identity.
  const float out_std = c.zero_init_out ? 0.0f : std / std::sqrt(2.0f * c.n_layer);
  auto matrix = [](std::string name, int64_t rows, int64_t cols, float s) {
    return ParamSpec{std::move(name), {rows, cols}, s > 0 ? Init::normal : Init::zeros, s};
  };
  auto linear = [&](std::string name, int64_t rows, int64_t cols, float s) {
    ParamSpec p = matrix(std::move(name), rows, cols, s);
    p.fp8 = true;
    return p;
  };
  auto packed = [&](std::string name, int64_t rows, int64_t cols, float s) {
    ParamSpec p = linear(std::move(name), rows, cols, s);
    p.packed = true;
    return p;
  };
  auto gain = [](std::string name, int64_t n) {
    return ParamSpec{std::move(name), {n}, Init::ones, 0.0f};
  };

  const int64_t pad_rows = c.padded_vocab() - c.vocab_size;
  auto vocab_matrix = [&](std::string name) {
    ParamSpec p = matrix(std::move(name), c.vocab_size, d, std);
    p.pad_rows = pad_rows;
    return p;
  };

  ModelLayout m;
  m.n_layer = c.n_layer;
  m.embed = {"embed", {vocab_matrix("embed.weight")}};
  // --value-embeds: the tables, zero at the start (ModelConfig::value_embeds).
  // Looked up, never multiplied, so they need no padding rows.
  for (int j = 0; j < c.value_embeds; ++j)
    m.embed.params.push_back(
        matrix("embed.value." + std::to_string(j), c.vocab_size, c.kv_dim(), 0));
  const std::string b = "blocks." + std::to_string(layer) + ".";
  m.block = {"blocks." + std::to_string(layer),
             {gain(b + "attn_norm", d), linear(b + "attn.wq", c.q_dim(), d, std),
              packed(b + "attn.wk", c.kv_dim(), d, std), packed(b + "attn.wv", c.kv_dim(), d, std),
              gain(b + "attn.q_norm", hd), gain(b + "attn.k_norm", hd),
              linear(b + "attn.wo", d, c.q_dim(), out_std), gain(b + "mlp_norm", d),
              linear(b + "mlp.w1", ff, d, std), packed(b + "mlp.w3", ff, d, std),
              linear(b + "mlp.w2", d, ff, out_std)}};
  // Without QK-norm its two gains are left out, and the ReLU² MLP has no W3;
  // the rest keep their order (transformer.cpp's at() maps the indices).
  if (c.relu2_mlp) m.block.params.erase(m.block.params.begin() + 9);
  if (!c.qk_norm) m.block.params.erase(m.block.params.begin() + 4, m.block.params.begin() + 6);
  // --unet-skips: the scalar a later-half block scales its skip by, last (in
  // every block, so that all keep one layout; ModelConfig::unet_skips).
  if (c.unet_skips) m.block.params.push_back(gain(b + "unet_skip", 1));
  // --value-embeds: the pair a block mixes its values and its table by, last.
  if (c.value_embeds > 0) m.block.params.push_back(gain(b + "value_mix", 2));
  // --value-residual-learned: the pair a block mixes its values and the first
  // block's by, last, starting at the fixed mix's (0.5, 0.5).
  if (c.value_residual_learned) {
    ParamSpec mix = gain(b + "value_residual_mix", 2);
    mix.init = Init::constant;
    mix.fill = 0.5f;
    m.block.params.push_back(mix);
  }
  m.head = {"head", {gain("final_norm", d)}};
  if (!c.tie_embeddings) m.head.params.push_back(vocab_matrix("head.weight"));
  return m;
}

// A unit's elements in long double: a shape beyond any machine must be
// counted, not overflow, for the size check to name it.
long double elements(const UnitSpec& u, bool stored) {
  long double n = 0;
  for (const ParamSpec& p : u.params) n += (long double)(stored ? p.stored_numel() : p.numel());
  return n;
}

}  // namespace

ModelLayout model_layout(const ModelConfig& c) {
  return layout_of(c, 0);
}

std::vector<UnitSpec> model_units(const ModelConfig& c) {
  ModelLayout m = layout_of(c, 0);
  std::vector<UnitSpec> units{std::move(m.embed), std::move(m.block)};
  for (int l = 1; l < c.n_layer; ++l) units.push_back(std::move(layout_of(c, l).block));
  units.push_back(std::move(m.head));
  return units;
}

int64_t num_params(const ModelConfig& c) {
  const ModelLayout m = model_layout(c);
  return int64_t(elements(m.embed, false) + m.n_layer * elements(m.block, false) +
                 elements(m.head, false));
}

int64_t num_matmul_params(const ModelConfig& c) {
  const ModelLayout m = model_layout(c);
  int64_t block = 0;  // the block's linears, the matrices FP8 runs as GEMMs
  for (const ParamSpec& p : m.block.params) block += p.fp8 ? p.numel() : 0;
  // The head's matrix is a matmul (the embedding's, when tied); an untied
  // embedding's lookup is not.
  const ParamSpec& head = c.tie_embeddings ? m.embed.params[0] : m.head.params.back();
  return m.n_layer * block + head.numel();
}

double flops_per_token(const ModelConfig& c, int seq_len) {
  // Attention's scores and weighted sum run over the heads' width, q_dim().
  return 6.0 * double(num_matmul_params(c)) + 12.0 * c.n_layer * c.q_dim() * double(seq_len);
}

// Sizes are int64 (row counts int); a shape beyond any machine would overflow
// them before the memory check could compare it with free memory. 2^48
// parameters (1 PiB of fp32 weights) leaves every derived byte count (16 per
// parameter for weights, gradients and AdamW, times gather buffers) far
// inside int64. The field named is the one that makes the shape absurd.
void validate_model(const ModelConfig& c) {
  c.validate_fields();
  const ModelLayout m = model_layout(c);
  const long double limit = std::ldexp(1.0L, 48);
  // The ends (embedding, final norm and an untied head) grow with the
  // vocabulary; the blocks with their widths and their number.
  const long double ends = elements(m.embed, true) + elements(m.head, true);
  const long double block = elements(m.block, true), total = ends + m.n_layer * block;
  if (total <= limit) return;
  const auto refuse = [&](const char* flag, int value) {
    char count[32];
    std::snprintf(count, sizeof count, "%.3Lg", total);
    throw_error(flag, ": value ", value, " is invalid: the model would have ", count,
                " parameters, more than the 2^48 any machine can hold; use a smaller value");
  };
  if (ends > limit) refuse("--vocab-size", c.vocab_size);
  if (block > limit) {
    // The MLP's matrices, or attention's: whichever holds more.
    long double mlp = 0;
    for (const ParamSpec& p : m.block.params)
      if (p.name.find(".mlp.") != std::string::npos) mlp += (long double)p.numel();
    if (mlp > block - mlp) refuse("--d-ff", c.d_ff);
    refuse("--d-model", c.d_model);
  }
  refuse("--n-layer", c.n_layer);
}

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// Uniform in (0, 1): 53 random bits, never exactly 0 so log() is finite.
double uniform(uint64_t bits) {
  return (double((bits >> 11)) + 0.5) * 0x1.0p-53;
}

}  // namespace

void init_param_slice(const ParamSpec& p, uint64_t seed, int64_t begin, int64_t count, float* out) {
  if (p.init != Init::normal) {
    std::fill(out, out + count,
              p.init == Init::ones       ? 1.0f
              : p.init == Init::constant ? p.fill
                                         : 0.0f);
    return;
  }
  // Counter-based normal samples: a hash of (seed, name, element) feeds one
  // Box-Muller draw per element. No sequential RNG state, so slices are free.
  const uint64_t key = mix64(seed ^ fnv1a(p.name));
  for (int64_t i = 0; i < count; ++i) {
    const uint64_t e = uint64_t(begin + i);
    const double u1 = uniform(mix64(key ^ (2 * e)));
    const double u2 = uniform(mix64(key ^ (2 * e + 1)));
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
    out[i] = float(z * p.std);
  }
}

}  // namespace fsdp
