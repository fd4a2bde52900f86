#include "model/params.h"

#include <cmath>

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

std::vector<UnitSpec> model_units(const ModelConfig& c) {
  const int64_t d = c.d_model, hd = c.head_dim(), ff = c.d_ff;
  const float std = c.init_std;
  // Output projections of each residual branch start smaller so the residual
  // stream's variance does not grow with depth (GPT-2's 1/sqrt(2L) scaling).
  const float out_std = std / std::sqrt(2.0f * c.n_layer);
  auto matrix = [](std::string name, int64_t rows, int64_t cols, float s) {
    return ParamSpec{std::move(name), {rows, cols}, Init::normal, s};
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

  std::vector<UnitSpec> units;
  units.push_back({"embed", {vocab_matrix("embed.weight")}});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string b = "blocks." + std::to_string(l) + ".";
    UnitSpec block{"blocks." + std::to_string(l),
                   {gain(b + "attn_norm", d), linear(b + "attn.wq", c.q_dim(), d, std),
                    packed(b + "attn.wk", c.kv_dim(), d, std),
                    packed(b + "attn.wv", c.kv_dim(), d, std), gain(b + "attn.q_norm", hd),
                    gain(b + "attn.k_norm", hd), linear(b + "attn.wo", d, c.q_dim(), out_std),
                    gain(b + "mlp_norm", d), linear(b + "mlp.w1", ff, d, std),
                    packed(b + "mlp.w3", ff, d, std), linear(b + "mlp.w2", d, ff, out_std)}};
    // Without QK-norm its two gains are left out; the rest keep their order
    // (transformer.cpp's at() maps the indices).
    if (!c.qk_norm) block.params.erase(block.params.begin() + 4, block.params.begin() + 6);
    units.push_back(std::move(block));
  }
  UnitSpec head{"head", {gain("final_norm", d)}};
  if (!c.tie_embeddings) head.params.push_back(vocab_matrix("head.weight"));
  units.push_back(std::move(head));
  return units;
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
  if (p.init == Init::ones) {
    for (int64_t i = 0; i < count; ++i) out[i] = 1.0f;
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
