#include "model/config.h"

#include <cmath>
#include <limits>
#include <map>

#include "common/error.h"

namespace fsdp {

int swiglu_width(int d_model, int multiple) {
  int w = (8 * d_model + 2) / 3;
  return (w + multiple - 1) / multiple * multiple;
}

namespace {

ModelConfig make(const char* name, int vocab, int layers, int d, int heads, int kv_heads,
                 int ff_multiple, int ctx) {
  ModelConfig c;
  c.name = name;
  c.vocab_size = vocab;
  c.n_layer = layers;
  c.d_model = d;
  c.n_head = heads;
  c.n_kv_head = kv_heads;
  c.d_ff = swiglu_width(d, ff_multiple);
  c.max_seq_len = ctx;
  return c;
}

// 50304 = GPT-2's 50257 padded to a multiple of 128 for GEMM-friendly shapes.
const std::map<std::string, ModelConfig>& presets() {
  static const std::map<std::string, ModelConfig> p = {
      {"tiny", make("tiny", 256, 2, 64, 4, 2, 32, 64)},
      {"gpt-125m", make("gpt-125m", 50304, 12, 768, 12, 4, 256, 1024)},
      {"gpt-350m", make("gpt-350m", 50304, 24, 1024, 16, 4, 256, 1024)},
      {"gpt-760m", make("gpt-760m", 50304, 24, 1536, 16, 4, 256, 1024)},
      {"gpt-1.3b", make("gpt-1.3b", 50304, 24, 2048, 16, 4, 256, 1024)},
  };
  return p;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> names;
  for (const auto& [k, v] : presets()) names.push_back(k);
  return names;
}

ModelConfig model_preset(const std::string& name) {
  auto it = presets().find(name);
  if (it == presets().end()) {
    std::string known;
    for (const auto& n : model_preset_names()) known += (known.empty() ? "" : ", ") + n;
    throw_error("--model: unknown preset '", name, "'; choose one of: ", known);
  }
  return it->second;
}

void ModelConfig::validate_fields() const {
  auto need = [](bool ok, const char* flag, auto value, const char* rule) {
    if (!ok) throw_error(flag, ": value ", value, " is invalid: ", rule);
  };
  need(vocab_size >= 2, "--vocab-size", vocab_size, "must be at least 2");
  // padded_vocab() must stay an int.
  need(vocab_size <= std::numeric_limits<int>::max() - kVocabAlign, "--vocab-size", vocab_size,
       "must be at most 2147483519");
  need(n_layer >= 1, "--n-layer", n_layer, "must be at least 1");
  need(d_model >= 2, "--d-model", d_model, "must be at least 2");
  need(head_size >= 0 && head_size <= kMaxHeadDim && head_size % 2 == 0, "--head-dim", head_size,
       "must be even and at most 512 (0: --d-model / --n-head)");
  need(n_head >= 1 && (head_size > 0 || d_model % n_head == 0), "--n-head", n_head,
       "must divide --d-model (or give --head-dim)");
  need(head_dim() % 2 == 0, "--n-head", n_head, "must leave an even head size for RoPE");
  need(head_size == 0 || int64_t(n_head) * head_size <= kMaxHeadDim * 1024, "--n-head", n_head,
       "times --head-dim must be at most 524288");
  need(n_kv_head >= 1 && n_head % n_kv_head == 0, "--n-kv-head", n_kv_head, "must divide --n-head");
  need(d_ff >= 1, "--d-ff", d_ff, "must be at least 1");
  need(max_seq_len >= 1, "--max-seq-len", max_seq_len, "must be at least 1");
  // Configurations also come from checkpoints, which are untrusted input.
  need(std::isfinite(rope_theta) && rope_theta > 0, "--rope-theta", rope_theta,
       "must be positive and finite");
  const RopeScaling s = rope().scaling;
  need(std::isfinite(s.factor) && (s.factor == 0 || s.factor >= 1), "--rope-scaling-factor",
       s.factor, "must be 0 (no scaling) or at least 1");
  if (s.enabled()) {
    need(std::isfinite(s.low_freq_factor) && s.low_freq_factor > 0, "--rope-low-freq-factor",
         s.low_freq_factor, "must be positive");
    need(std::isfinite(s.high_freq_factor) && s.high_freq_factor > s.low_freq_factor,
         "--rope-high-freq-factor", s.high_freq_factor, "must exceed --rope-low-freq-factor");
    need(s.original_context >= 1, "--rope-original-context", s.original_context,
         "must be at least 1");
  }
  need(std::isfinite(norm_eps) && norm_eps > 0, "--norm-eps", norm_eps,
       "must be positive and finite");
  need(std::isfinite(init_std) && init_std > 0, "--init-std", init_std,
       "must be positive and finite");
}

}  // namespace fsdp
