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

const std::vector<ModelField>& model_fields() {
  using M = ModelConfig;
  using R = ModelField::Resume;
  const auto scaled = [](const M& c) { return c.rope_scaling_factor > 0; };
  // clang-format off
  static const std::vector<ModelField> fields = {
    {"vocab-size", &M::vocab_size, "override the preset: vocabulary size", "300", "vocab_size"},
    {"n-layer", &M::n_layer, "override the preset: transformer blocks", "3", "n_layer"},
    {"d-model", &M::d_model, "override the preset: model width", "96", "d_model"},
    {"n-head", &M::n_head, "override the preset: attention heads", "6", "n_head"},
    {"n-kv-head", &M::n_kv_head, "override the preset: key/value heads (GQA)", "3", "n_kv_head"},
    // Stored only where off, as Llama and SmolLM2 have it.
    {"qk-norm", &M::qk_norm,
     "override the preset: RMSNorm q and k per head before RoPE (Qwen3); false: none (Llama)",
     "false", "qk_norm", [](const M& c) { return !c.qk_norm; }, R::must_match, 0, 1},
    // Stored only where the heads are not d_model / n_head wide: a file
    // without it means that width (and every file before --head-dim has none).
    {"head-dim", &M::head_size,
     "override the preset: width of each attention head (0: --d-model / --n-head)", "32",
     "head_dim", [](const M& c) { return c.explicit_head_dim() > 0; }, R::must_match, 2,
     ModelConfig::kMaxHeadDim},
    {"d-ff", &M::d_ff, "override the preset: the MLP's hidden width", "200", "d_ff"},
    {"max-seq-len", &M::max_seq_len, "override the preset: context length", "128", "max_seq_len",
     nullptr, R::may_change},  // RoPE has no learned positions
    {"rope-theta", &M::rope_theta, "override the preset: RoPE base", "500000", "rope_theta"},
    // The scaling's shape counts only where both scale (else the factor says it).
    {"rope-scaling-factor", &M::rope_scaling_factor,
     "Llama 3.1/3.2's RoPE scaling (rope_type llama3): slow frequencies divided by it (0: no "
     "scaling)", "32", "rope_scaling_factor", scaled},
    {"rope-low-freq-factor", &M::rope_low_freq_factor,
     "with --rope-scaling-factor: wavelengths above --rope-original-context / this are scaled",
     "2", "rope_low_freq_factor", scaled, R::must_match_where_both_stored},
    {"rope-high-freq-factor", &M::rope_high_freq_factor,
     "with --rope-scaling-factor: wavelengths below --rope-original-context / this are kept",
     "8", "rope_high_freq_factor", scaled, R::must_match_where_both_stored},
    {"rope-original-context", &M::rope_original_context,
     "with --rope-scaling-factor: the context the model was pretrained at", "16384",
     "rope_original_context", scaled, R::must_match_where_both_stored},
    {"norm-eps", &M::norm_eps, "override the preset: RMSNorm epsilon", "1e-06", "norm_eps"},
    {"init-std", &M::init_std, "override the preset: initialisation std", "0.01", "init_std",
     nullptr, R::may_change},
    // Stored only when set: older files have none and started GPT-2's way.
    {"zero-init-out", &M::zero_init_out,
     "start attention's and the MLP's output projections (wo, w2) at zero instead of "
     "--init-std / sqrt(2 --n-layer) (a token-saving lever; docs/LEVERS.md)",
     "true", "zero_init_out", [](const M& c) { return c.zero_init_out; }, R::may_change, 0, 1},
    // Both stored only when set: older files have neither.
    {"logit-softcap", &M::logit_softcap,
     "cap the head's logits at C by C tanh(logit / C) before the softmax (0: none; a "
     "token-saving lever; docs/LEVERS.md)",
     "30", "logit_softcap", [](const M& c) { return c.logit_softcap != 0; }},
    {"z-loss", &M::z_loss,
     "add this times lse^2 (the log of the softmax's normaliser) to each token's training loss "
     "(0: none; a token-saving lever; docs/LEVERS.md)",
     "0.0001", "z_loss", [](const M& c) { return c.z_loss != 0; }, R::may_change},
    // Stored only when set: older files have SwiGLU.
    {"relu2-mlp", &M::relu2_mlp,
     "MLP of relu(x W1^T)^2 W2^T instead of SwiGLU (no W3; for SwiGLU's parameters give --d-ff "
     "1.5x the preset's; a token-saving lever; docs/LEVERS.md)",
     "true", "relu2_mlp", [](const M& c) { return c.relu2_mlp; }, R::must_match, 0, 1},
    // Stored only when set: older files have none.
    {"value-residual", &M::value_residual,
     "every block after the first attends over the mean of its own values and the first "
     "block's (ResFormer's value residual; a token-saving lever; docs/LEVERS.md)",
     "true", "value_residual", [](const M& c) { return c.value_residual; }, R::must_match, 0, 1},
    // Stored only when set: older files have none.
    {"value-residual-learned", &M::value_residual_learned,
     "with --value-residual, every block after the first mixes its own values and the first "
     "block's by a learned pair, starting at the mean (a token-saving lever; docs/LEVERS.md)",
     "true", "value_residual_learned", [](const M& c) { return c.value_residual_learned; },
     R::must_match, 0, 1},
    // Stored only when set: older files have none.
    {"unet-skips", &M::unet_skips,
     "the later half of the blocks each add their mirror block's input, scaled by a learned "
     "scalar (modded-nanogpt's U-net skips; a token-saving lever; docs/LEVERS.md)",
     "true", "unet_skips", [](const M& c) { return c.unet_skips; }, R::must_match, 0, 1},
    // Stored only when set: older files have none.
    {"value-embeds", &M::value_embeds,
     "this many value-embedding tables, mixed into the values of the first and of the last that "
     "many blocks by a learned pair each (modded-nanogpt's value embeddings; 0: none; a "
     "token-saving lever; docs/LEVERS.md)",
     "1", "value_embeds", [](const M& c) { return c.value_embeds != 0; }, R::must_match, 0},
    // Stored only when set: older files have none. A pattern of training,
    // not of the weights: a single document means the same either way.
    {"document-mask", &M::document_mask,
     "attention stops where documents end: a token attends only to the earlier tokens of its own "
     "document (after the data's last end-of-text token before it; a token-saving lever; "
     "docs/LEVERS.md)",
     "true", "document_mask", [](const M& c) { return c.document_mask; }, R::may_change, 0, 1},
    {"tie-embeddings", &M::tie_embeddings, "override the preset: share embedding and head",
     "false", "tie_embeddings", nullptr, R::must_match, 0, 1},
  };
  // clang-format on
  return fields;
}

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
  if (vocab_size > std::numeric_limits<int>::max() - kVocabAlign)
    throw_error("--vocab-size: value ", vocab_size, " is invalid: must be at most ",
                std::numeric_limits<int>::max() - kVocabAlign);
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
  need(std::isfinite(logit_softcap) && logit_softcap >= 0, "--logit-softcap", logit_softcap,
       "must be 0 (none) or positive");
  need(std::isfinite(z_loss) && z_loss >= 0 && z_loss <= 1, "--z-loss", z_loss,
       "must be between 0 (none) and 1");
  if (value_residual && n_layer < 2)
    throw_error(
        "--value-residual: needs --n-layer 2 or more (the first block's values are mixed "
        "into the later blocks'); --n-layer is ",
        n_layer);
  if (value_residual_learned && !value_residual)
    throw_error(
        "--value-residual-learned: learns the value residual's mix, so needs --value-residual "
        "true");
  need(value_embeds >= 0 && int64_t(value_embeds) * 2 <= n_layer, "--value-embeds", value_embeds,
       "must be between 0 (none) and half of --n-layer (the first and the last that many blocks "
       "each take one table)");
  if (unet_skips && n_layer < 2)
    throw_error(
        "--unet-skips: needs --n-layer 2 or more (the later half of the blocks take the "
        "earlier half's inputs); --n-layer is ",
        n_layer);
}

}  // namespace fsdp
