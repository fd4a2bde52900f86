// Model shape: presets by name, every field overridable from the command line.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/rope.h"

namespace fsdp {

struct ModelConfig {
  std::string name = "tiny";
  int vocab_size = 256;
  int n_layer = 2;
  int d_model = 64;
  int n_head = 4;
  int n_kv_head = 2;  // grouped-query attention: n_kv_head divides n_head
  int d_ff = 192;     // the MLP's hidden width (SwiGLU's, or ReLU²'s with relu2_mlp)
  int max_seq_len = 64;
  float rope_theta = 10000.0f;
  // Llama 3.1/3.2's frequency rescaling (model/rope.h); factor 0: none.
  float rope_scaling_factor = 0;
  float rope_low_freq_factor = 1;
  float rope_high_freq_factor = 4;
  int rope_original_context = 8192;
  float norm_eps = 1e-5f;
  float init_std = 0.02f;
  bool tie_embeddings = true;
  // --head-dim: each attention head's width, where a model sets it apart
  // from d_model / n_head (Qwen3-0.6B: 16 heads of 128 over d_model 1024).
  // 0: d_model / n_head. Read it through head_dim().
  int head_size = 0;
  // QK-norm: an RMSNorm with a learned gain over each head's q and k before
  // RoPE (Qwen3, OLMo 2). false: RoPE alone, as in Llama and SmolLM2.
  bool qk_norm = true;
  // Zero-initialised output projections (attention's wo, the MLP's w2), as
  // modded-nanogpt's records start: every block begins as the identity on the
  // residual stream. false: GPT-2's init_std / sqrt(2 n_layer). Only where
  // training starts; the weights mean the same either way.
  bool zero_init_out = false;
  // Logit soft-capping (Gemma 2, modded-nanogpt): the head's logits pass
  // through cap * tanh(logit / cap) before the softmax, wherever logits are
  // used (loss, validation, sampling), so none leaves (-cap, cap). 0: none.
  float logit_softcap = 0;
  // z-loss (PaLM): training minimises cross-entropy + z_loss * lse^2 per
  // token, lse the log of the softmax's normaliser, which keeps the logits
  // from drifting. Training only: validation reports the cross-entropy
  // alone, and the weights mean the same with or without it. 0: none.
  float z_loss = 0;
  // ReLU² MLP (Primer; modded-nanogpt): relu(x W1^T)^2 W2^T, two matrices
  // instead of SwiGLU's three (no W3). At SwiGLU's parameter count its hidden
  // width is 1.5 d_ff (gpt-350m: --d-ff 4224 against SwiGLU's 2816); d_ff is
  // what it says either way. false: SwiGLU.
  bool relu2_mlp = false;
  // Value residual (ResFormer; modded-nanogpt's value embeddings are its
  // relative): every block after the first attends over the mean of its own
  // values and the first block's, v = (v + v_first) / 2, so the first layer's
  // token information reaches every layer's attention output directly. A
  // fixed mix: no parameter, the layout unchanged. Needs 2 or more layers.
  bool value_residual = false;
  // The value residual's learned mix (ResFormer's learnable variant, as
  // modded-nanogpt ran it): every block after the first takes
  // v = w0 v + w1 v_first, (w0, w1) a learned pair of the block (its unit's
  // `value_residual_mix`, starting at (0.5, 0.5): exactly the fixed mean, so
  // training starts from the model with the fixed mix). Every block has the
  // pair so that all keep one layout; the first block's is never read. Needs
  // value_residual.
  bool value_residual_learned = false;
  // U-net skips (modded-nanogpt): the later half of the blocks each add the
  // stream that entered their mirror block of the earlier half, scaled by a
  // learned scalar: block l > (n_layer - 1) / 2 takes x_l + s_l x_{n-1-l}
  // (x_0 the embedding's output; an odd model's middle block takes none).
  // Every block has the scalar (its unit's `unet_skip`, starting at 1) so
  // that all blocks keep one layout; the earlier half's is never read, its
  // gradient stays zero and AdamW leaves it at 1. Needs 2 or more layers.
  bool unet_skips = false;
  // U-net skips: does block `layer` take one (block n_layer-1-layer's input),
  // or send its own input as one (to block n_layer-1-layer)?
  bool takes_skip(int layer) const { return unet_skips && n_layer - 1 - layer < layer; }
  bool sends_skip(int layer) const { return unet_skips && layer < n_layer - 1 - layer; }
  // The number of skips: each from block i's input to block n_layer-1-i's.
  int num_skips() const { return unet_skips ? n_layer / 2 : 0; }
  // Value embeddings (modded-nanogpt): value_embeds tables of vocab_size x
  // kv_dim in the embedding's unit; table j is looked up by the tokens and
  // mixed into the values of block j and of block n_layer-value_embeds+j,
  // v = w0 v + w1 ve, (w0, w1) a learned pair of that block (its unit's
  // `value_mix`, starting at (1, 1)). The tables start at zero, so training
  // starts from the model without them. Every block has the pair so that
  // all keep one layout; the middle blocks' is never read. 0: none; at most
  // n_layer / 2. After --value-residual's mix where both are on.
  int value_embeds = 0;
  // The table block `layer` mixes in, or -1.
  int value_embed_of(int layer) const {
    if (layer < value_embeds) return layer;
    if (layer >= n_layer - value_embeds) return layer - (n_layer - value_embeds);
    return -1;
  }
  // Attention stopped at document ends (Megatron's --reset-attention-mask,
  // torchtitan's block-causal mask, modded-nanogpt's document mask): a token
  // attends to the earlier tokens of its own document only, a document
  // running from the window's start or from the token after an end-of-text
  // token to the next end-of-text token, which it includes. Positions (RoPE)
  // run on across documents, as in those trainers. No parameter: a model
  // trained with it reads one document as a model without it does.
  bool document_mask = false;

  Rope rope() const {
    return {
        rope_theta,
        {rope_scaling_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_context}};
  }
  int head_dim() const { return head_size > 0 ? head_size : d_model / n_head; }
  // head_size as files store it: 0 where it equals d_model / n_head.
  int explicit_head_dim() const {
    return head_size > 0 && int64_t(head_size) * n_head != d_model ? head_size : 0;
  }
  int q_dim() const { return n_head * head_dim(); }
  // The MLP's up-projection output per token: W1|W3's a|b, or ReLU²'s W1 alone.
  int64_t mlp_up_dim() const { return relu2_mlp ? d_ff : 2 * int64_t(d_ff); }
  int kv_dim() const { return n_kv_head * head_dim(); }
  // The vocabulary rounded up to a multiple of 128: the rows of the embedding
  // (and untied head) as stored, and the columns of the logits, so every GEMM
  // operand stays 16-byte aligned and tile-shaped whatever --vocab-size is
  // (50257 included). The extra rows are zero and get no gradient; the loss
  // ignores their columns; checkpoints and exports hold only vocab_size rows.
  static constexpr int kVocabAlign = 128;
  static constexpr int kMaxHeadDim = 512;  // the RoPE kernels' widest head
  int padded_vocab() const { return (vocab_size + kVocabAlign - 1) / kVocabAlign * kVocabAlign; }

  bool operator==(const ModelConfig&) const = default;

  // Throws fsdp::Error naming the first field out of range or inconsistent
  // with another. The model's size is checked from its parameter layout:
  // validate_model() (model/params.h) runs both, and is what callers use.
  void validate_fields() const;
};

// A field a user sets, written once: its flag and help for the command line
// (src/options/option_table.cpp makes a --flag of each row) and its place in
// a checkpoint's /model group (checkpoint/file_meta.cpp writes, reads and
// compares it by this row). A new model option is a field above, a row in
// model_fields() and, where it has a range, a rule in validate_fields().
struct ModelField {
  const char* flag;  // without the dashes
  std::variant<int ModelConfig::*, float ModelConfig::*, bool ModelConfig::*> member;
  const char* help;
  // A value no preset has; all rows' examples together make a valid model
  // (the options' and the checkpoint's round trips set them).
  const char* example;
  const char* attribute;  // its name in /model
  // Where given: a checkpoint holds the field only where this is true, and a
  // file without it reads as ModelConfig's default. Fields added after the
  // format are stored only away from the meaning older files have.
  bool (*stored_if)(const ModelConfig&) = nullptr;
  // On resume: must the saved value match the running one? Weights trained
  // under one value mean something else under another (must_match); a
  // context length or an initialisation does not change them (may_change);
  // the shape of the RoPE scaling counts only where both scale, the factor
  // saying the rest (must_match_where_both_stored).
  enum class Resume { must_match, may_change, must_match_where_both_stored };
  Resume resume = Resume::must_match;
  // An integer's range as a file may hold it (validate_fields() judges the rest).
  int64_t file_min = 1, file_max = 2147483647;
};

// In the order --help, OPTIONS.md and a resume's list of mismatches show them.
const std::vector<ModelField>& model_fields();

// Throws fsdp::Error for an unknown name, listing the known ones.
ModelConfig model_preset(const std::string& name);
std::vector<std::string> model_preset_names();

// SwiGLU width: 8/3 d rounded up to a multiple (keeps parameters ~ a 4x GELU MLP).
int swiglu_width(int d_model, int multiple);

}  // namespace fsdp
