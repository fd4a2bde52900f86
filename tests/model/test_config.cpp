#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "model/config.h"
#include "model/params.h"

namespace fsdp {
namespace {

// validate_model must refuse c with a message that names `flag`.
void expect_refused(const ModelConfig& c, const std::string& flag) {
  try {
    validate_model(c);
    ADD_FAILURE() << flag << " accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
  }
}

TEST(ModelConfig, Gpt350mMatchesTheDesign) {
  ModelConfig c = model_preset("gpt-350m");
  EXPECT_EQ(c.n_layer, 24);
  EXPECT_EQ(c.d_model, 1024);
  EXPECT_EQ(c.n_head, 16);
  EXPECT_EQ(c.head_dim(), 64);
  EXPECT_EQ(c.max_seq_len, 1024);
  EXPECT_EQ(c.d_ff % 256, 0);
  EXPECT_NEAR(double(c.d_ff) / c.d_model, 2.7, 0.1);
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_LT(c.n_kv_head, c.n_head);  // GQA
  EXPECT_GT(num_params(c), 300'000'000);
  EXPECT_LT(num_params(c), 400'000'000);
  // docs/ARCHITECTURE.md, "FLOPs and MFU": 2.234 GFLOP per token at context 1024.
  EXPECT_NEAR(flops_per_token(c, 1024) / 1e9, 2.4, 0.3);
}

TEST(ModelConfig, ParamCountMatchesUnits) {
  for (const auto& name : model_preset_names()) {
    for (bool tied : {true, false}) {
      ModelConfig c = model_preset(name);
      c.tie_embeddings = tied;
      c.qk_norm = tied;  // with and without QK-norm's gains
      int64_t n = 0;
      for (const auto& u : model_units(c))
        for (const auto& p : u.params) n += p.numel();
      EXPECT_EQ(n, num_params(c)) << name;
      EXPECT_EQ(int(model_units(c).size()), c.n_layer + 2);
    }
  }
}

// The counts come from the unit layout (model/params.cpp); this is the
// closed form written apart from it, so that a parameter added to the layout
// and a count that disagrees with the design cannot both pass unnoticed.
TEST(ModelConfig, CountsMatchTheClosedForm) {
  for (const auto& name : model_preset_names()) {
    for (int variant = 0; variant < 8; ++variant) {
      ModelConfig c = model_preset(name);
      c.tie_embeddings = variant & 1;
      c.qk_norm = variant & 2;
      if (variant & 4) c.head_size = 128;
      validate_model(c);
      const int64_t d = c.d_model, v = c.vocab_size, L = c.n_layer, ff = c.d_ff;
      const int64_t q = c.q_dim(), kv = c.kv_dim(), hd = c.head_dim();
      const int64_t linears = d * q + 2 * d * kv + q * d + 3 * d * ff;
      const int64_t gains = 2 * d + (c.qk_norm ? 2 * hd : 0);
      EXPECT_EQ(num_params(c), (c.tie_embeddings ? 1 : 2) * v * d + L * (gains + linears) + d)
          << name << " variant " << variant;
      EXPECT_EQ(num_matmul_params(c), L * linears + v * d) << name << " variant " << variant;
      EXPECT_EQ(flops_per_token(c, 1024), 6.0 * double(L * linears + v * d) + 12.0 * L * q * 1024);
    }
  }
}

// --value-embeds K: K tables of vocab x kv_dim and a pair per block, none
// of them a matmul; at most n_layer / 2 tables, and never negative.
TEST(ModelConfig, ValueEmbedsCountAndRange) {
  for (int K : {1, 3}) {
    ModelConfig c = model_preset("gpt-350m");
    const int64_t plain = num_params(c), matmul = num_matmul_params(c);
    c.value_embeds = K;
    validate_model(c);
    EXPECT_EQ(num_params(c), plain + K * int64_t(c.vocab_size) * c.kv_dim() + 2 * c.n_layer);
    EXPECT_EQ(num_matmul_params(c), matmul);
    EXPECT_EQ(c.value_embed_of(0), 0);
    EXPECT_EQ(c.value_embed_of(K - 1), K - 1);
    EXPECT_EQ(c.value_embed_of(K), -1);
    EXPECT_EQ(c.value_embed_of(c.n_layer - K), 0);
    EXPECT_EQ(c.value_embed_of(c.n_layer - 1), K - 1);
  }
  ModelConfig c = model_preset("tiny");  // 2 layers: one table at most
  c.value_embeds = 1;
  EXPECT_NO_THROW(validate_model(c));
  for (int bad : {2, -1}) {
    SCOPED_TRACE(bad);
    c.value_embeds = bad;
    expect_refused(c, "--value-embeds");
  }
}

// --value-residual-learned: a pair per block, last in its unit (after the
// value embeddings' where both are on), starting at (0.5, 0.5); it learns
// --value-residual's mix, so it is refused without it.
TEST(ModelConfig, ValueResidualLearnedHasAPairPerBlock) {
  ModelConfig c = model_preset("tiny");
  const int64_t plain = num_params(c), matmul = num_matmul_params(c);
  c.value_residual_learned = true;
  expect_refused(c, "--value-residual-learned");
  c.value_residual = true;
  c.value_embeds = 1;
  validate_model(c);
  EXPECT_EQ(num_params(c),
            plain + int64_t(c.vocab_size) * c.kv_dim() + 2 * c.n_layer + 2 * c.n_layer);
  EXPECT_EQ(num_matmul_params(c), matmul);
  const std::vector<UnitSpec> units = model_units(c);
  for (int l = 0; l < c.n_layer; ++l) {
    const std::vector<ParamSpec>& p = units[size_t(l) + 1].params;
    const std::string b = "blocks." + std::to_string(l) + ".";
    ASSERT_GE(p.size(), 2u);
    EXPECT_EQ(p[p.size() - 2].name, b + "value_mix");
    EXPECT_EQ(p.back().name, b + "value_residual_mix");
    EXPECT_EQ(p.back().shape, std::vector<int64_t>{2});
    EXPECT_FALSE(p.back().decay());
    float pair[2] = {0, 0};
    init_param_slice(p.back(), 7, 0, 2, pair);
    EXPECT_EQ(pair[0], 0.5f);
    EXPECT_EQ(pair[1], 0.5f);
  }
}

TEST(ModelConfig, UnknownPresetNamesTheChoices) {
  try {
    model_preset("gpt-7b");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-7b"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("gpt-350m"), std::string::npos);
  }
}

TEST(ModelConfig, RejectsInconsistentShapes) {
  ModelConfig c = model_preset("tiny");
  c.n_kv_head = 3;  // does not divide n_head = 4
  EXPECT_THROW(validate_model(c), Error);
  c = model_preset("tiny");
  c.n_head = 5;  // does not divide d_model = 64
  EXPECT_THROW(validate_model(c), Error);
  c = model_preset("tiny");
  c.n_head = 64;  // head size 1: RoPE needs pairs
  EXPECT_THROW(validate_model(c), Error);
}

// The head's loss terms: a cap and a z coefficient are positive or 0 (off).
TEST(ModelConfig, RejectsBadHeadLossTerms) {
  ModelConfig c = model_preset("tiny");
  c.logit_softcap = 30;
  c.z_loss = 1e-4f;
  EXPECT_NO_THROW(validate_model(c));
  for (float bad : {-1.0f, INFINITY, NAN}) {
    c = model_preset("tiny");
    c.logit_softcap = bad;
    EXPECT_THROW(validate_model(c), Error) << "softcap " << bad;
    c = model_preset("tiny");
    c.z_loss = bad;
    EXPECT_THROW(validate_model(c), Error) << "z_loss " << bad;
  }
  c = model_preset("tiny");
  c.z_loss = 2;  // a typo for 2e-4 would drown the cross-entropy
  EXPECT_THROW(validate_model(c), Error);
}

// --head-dim (Qwen3-0.6B: 16 heads of 128 over d_model 1024): the heads set
// q|k|v's and Wo's inner width, d_model stays the residual's.
TEST(ModelConfig, HeadDimApartFromWidth) {
  ModelConfig c = model_preset("gpt-350m");
  c.head_size = 128;
  validate_model(c);
  EXPECT_EQ(c.head_dim(), 128);
  EXPECT_EQ(c.q_dim(), 2048);
  EXPECT_EQ(c.kv_dim(), 512);
  int64_t n = 0;
  for (const auto& u : model_units(c))
    for (const auto& p : u.params) n += p.numel();
  EXPECT_EQ(n, num_params(c));
  const ModelConfig plain = model_preset("gpt-350m");
  EXPECT_GT(flops_per_token(c, 1024), flops_per_token(plain, 1024));
  c.n_head = 12;  // 1024 / 12 is no integer, and need not be with --head-dim
  c.n_kv_head = 4;
  validate_model(c);
  for (int bad : {7, 514, -2}) {
    SCOPED_TRACE(bad);
    c.head_size = bad;
    expect_refused(c, "--head-dim");
  }
}

TEST(ParamInit, SliceEqualsWholeSoShardingDoesNotChangeTheModel) {
  ParamSpec p{"blocks.0.attn.wq", {8, 16}, Init::normal, 0.02f};
  std::vector<float> whole(128), part(128);
  init_param_slice(p, 42, 0, 128, whole.data());
  init_param_slice(p, 42, 0, 50, part.data());
  init_param_slice(p, 42, 50, 78, part.data() + 50);
  EXPECT_EQ(whole, part);
  std::vector<float> other(128);
  init_param_slice(p, 43, 0, 128, other.data());
  EXPECT_NE(whole, other);
  double sum = 0, sq = 0;
  std::vector<float> big(100000);
  init_param_slice(p, 1, 0, 100000, big.data());
  for (float x : big) sum += x, sq += double(x) * x;
  EXPECT_NEAR(sum / 1e5, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / 1e5), 0.02, 5e-4);
}

// --zero-init-out: wo and w2 start at zero, every other parameter exactly
// as without it (the same draws), so the lever changes only those two.
TEST(ParamInit, ZeroInitOutZeroesOnlyTheOutputProjections) {
  ModelConfig c = model_preset("tiny");
  const std::vector<UnitSpec> plain = model_units(c);
  c.zero_init_out = true;
  const std::vector<UnitSpec> zeroed = model_units(c);
  ASSERT_EQ(plain.size(), zeroed.size());
  int zero_params = 0;
  for (size_t u = 0; u < plain.size(); ++u) {
    ASSERT_EQ(plain[u].params.size(), zeroed[u].params.size());
    for (size_t i = 0; i < plain[u].params.size(); ++i) {
      const ParamSpec &a = plain[u].params[i], &b = zeroed[u].params[i];
      std::vector<float> va(a.numel()), vb(b.numel());
      init_param_slice(a, 7, 0, a.numel(), va.data());
      init_param_slice(b, 7, 0, b.numel(), vb.data());
      const bool out = b.name.ends_with("attn.wo") || b.name.ends_with("mlp.w2");
      if (!out) {
        EXPECT_EQ(va, vb) << b.name;
        continue;
      }
      ++zero_params;
      EXPECT_EQ(b.init, Init::zeros) << b.name;
      EXPECT_EQ(vb, std::vector<float>(b.numel(), 0.0f)) << b.name;
      EXPECT_NE(va, vb) << b.name;
      EXPECT_EQ(a.shape, b.shape) << b.name;
    }
  }
  EXPECT_EQ(zero_params, 2 * c.n_layer);
}

}  // namespace
}  // namespace fsdp
