// The LM head and cross-entropy run a chunk of rows at a time, each chunk's
// gradient sent through the head inside the training forward
// (Transformer::kHeadRows). Any chunking must train like one chunk over all
// rows, and sampling must still see the logits of the rows it asks for.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "model/cpu/cpu_ops.h"
#include "model/transformer.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

constexpr int B = 2, T = 6, N = B * T;

struct Batch {
  std::vector<int32_t> in, tgt;
  explicit Batch(const ModelConfig& c) : in(N), tgt(N) {
    for (int i = 0; i < N; ++i)
      in[i] = (i * 7 + 1) % c.vocab_size, tgt[i] = (i * 5 + 3) % c.vocab_size;
    tgt[4] = -1;  // an ignored target inside a chunk
  }
};

struct Trained {
  double loss;
  std::vector<std::vector<float>> grads;  // per unit
};

// Two micro-batches of training with `head_rows` rows per head chunk.
Trained train(const ModelConfig& c, int head_rows) {
  CpuOps ops;
  Transformer m(c, ops, B, T, Recompute::none, false, head_rows);
  testing::FullWeights w(m.units(), 7);
  const Batch b(c);
  double loss = 0;
  for (int rep = 0; rep < 2; ++rep) {  // the second must find no chunk state left over
    m.set_batch(b.in.data(), b.tgt.data(), 0.25f);
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
    loss += m.loss_sum();  // known after the training forward, before backward
    for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
  }
  Trained t{loss, {}};
  for (int u = 0; u < m.num_units(); ++u) t.grads.push_back(w.unit_grads(u));
  return t;
}

// Chunks change only how rows are grouped into GEMMs (and the order the
// head weight's gradient adds them in), so agreement is to fp32 rounding.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  float scale = 0;
  for (float x : want) scale = std::max(scale, std::abs(x));
  ASSERT_GT(scale, 0.0f) << what << ": a gradient of zeros checks nothing";
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-6f * scale) << what << " element " << i;
}

TEST(HeadChunks, AnyChunkingTrainsLikeOneChunk) {
  for (bool tied : {true, false}) {
    ModelConfig c = testing::small_model_config();
    c.tie_embeddings = tied;
    const Trained whole = train(c, N);
    // 1 and 5 leave a short last chunk; 0 is kHeadRows, one chunk here.
    for (int rows : {1, 5, 11, 0}) {
      SCOPED_TRACE(::testing::Message() << "tied " << tied << ", head_rows " << rows);
      const Trained t = train(c, rows);
      EXPECT_NEAR(t.loss, whole.loss, 1e-6 * std::abs(whole.loss));
      for (size_t u = 0; u < t.grads.size(); ++u)
        expect_close(t.grads[u], whole.grads[u], c.tie_embeddings ? "tied" : "untied");
    }
  }
}

TEST(HeadChunks, LogitsHoldOneChunk) {
  const ModelConfig c = testing::small_model_config();
  CpuOps ops;
  const int64_t Vp = c.padded_vocab();
  Transformer whole(c, ops, B, T, Recompute::none, false, N);
  Transformer chunked(c, ops, B, T, Recompute::none, false, 5);
  EXPECT_EQ(whole.activation_bytes() - chunked.activation_bytes(), (N - 5) * Vp * 4);
  EXPECT_EQ(chunked.activation_bytes(),
            Transformer::activation_bytes_for(c, B, T, DType::f32, Recompute::none, false, 5));
  // More rows than the micro-batch holds: one chunk of them all.
  EXPECT_EQ(Transformer::activation_bytes_for(c, B, T, DType::f32, Recompute::none, false, 99),
            whole.activation_bytes());
}

TEST(HeadChunks, SamplingGetsTheRowsItKept) {
  const ModelConfig c = testing::small_model_config();
  CpuOps ops;
  const Batch b(c);
  testing::FullWeights w(model_units(c), 7);
  std::vector<std::vector<float>> want, got;
  const std::vector<int64_t> rows = {0, 4, 5, 11};  // first, last of a chunk, next, the end
  for (int head_rows : {N, 5}) {
    Transformer m(c, ops, B, T, Recompute::none, false, head_rows);
    m.keep_logits(rows);
    m.set_batch(b.in.data(), b.tgt.data(), 0.0f);
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, false);
    auto& out = head_rows == N ? want : got;
    for (int64_t r : rows) out.push_back(m.logits_row(r));
    EXPECT_THROW(m.logits_row(3), Error);  // not kept: no stale chunk is handed out
    EXPECT_THROW(m.keep_logits({N}), Error);
    // The request served that forward only: the next (an evaluation after
    // sampling) keeps nothing, and copies nothing to the host.
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, false);
    EXPECT_THROW(m.logits_row(rows[0]), Error);
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(got[i].size(), size_t(c.vocab_size));
    expect_close(got[i], want[i], "logits");
  }
}

// --logit-softcap: sampling draws from the softmax the loss uses, so a kept
// row holds cap tanh(logit / cap) of the uncapped model's row.
TEST(HeadChunks, KeptLogitsAreCapped) {
  const ModelConfig plain = testing::small_model_config();
  ModelConfig capped = plain;
  capped.logit_softcap = 0.05f;
  CpuOps ops;
  const Batch b(plain);
  testing::FullWeights w(model_units(plain), 7);
  std::vector<std::vector<float>> rows;
  for (const ModelConfig& c : {plain, capped}) {
    Transformer m(c, ops, B, T);
    m.keep_logits({4});
    m.set_batch(b.in.data(), b.tgt.data(), 0.0f);
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, false);
    rows.push_back(m.logits_row(4));
  }
  std::vector<float> want;
  float widest = 0;
  for (float z : rows[0]) {
    want.push_back(float(0.05 * std::tanh(z / 0.05)));
    widest = std::max(widest, std::abs(z));
  }
  ASSERT_GT(widest, 0.1f) << "a cap that bends no logit tests nothing";
  expect_close(rows[1], want, "capped logits");
}

}  // namespace
}  // namespace fsdp
