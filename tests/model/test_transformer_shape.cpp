// Transformer::set_shape: micro-batches of another batch x seq_len inside the
// rows the constructor allocated (validation at another context than
// training's, --eval-seq-len). A reshaped model must compute exactly what a
// model built for that shape computes, whatever the earlier shape left in the
// buffers, and go back to its own shape unchanged.
#include <gtest/gtest.h>

#include <vector>

#include "common/error.h"
#include "model/cpu/cpu_ops.h"
#include "model/transformer.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

constexpr int kB = 4, kT = 6;  // the shape the model is built for: 24 rows

ModelConfig config() {
  ModelConfig c = testing::small_model_config();
  c.max_seq_len = 16;
  return c;
}

struct Result {
  double loss;
  int64_t count;
  std::vector<std::vector<float>> grads;  // per unit
};

// One training forward and backward of a B x T micro-batch on fresh gradients.
Result train(Transformer& m, int B, int T, int salt) {
  const int n = B * T, V = m.config().vocab_size;
  std::vector<int32_t> in(n), tgt(n);
  for (int i = 0; i < n; ++i)
    in[i] = (i * 7 + salt) % V, tgt[i] = i % 5 == 3 ? -1 : (i * 5 + 3 + salt) % V;
  testing::FullWeights w(m.units(), 7);
  m.set_batch(in.data(), tgt.data(), 0.25f);
  for (int u = 0; u < m.num_units(); ++u) m.forward(u, w, true);
  Result r{m.loss_sum(), m.loss_count(), {}};
  for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, w);
  for (int u = 0; u < m.num_units(); ++u) r.grads.push_back(w.unit_grads(u));
  return r;
}

void expect_same(const Result& got, const Result& want) {
  EXPECT_EQ(got.loss, want.loss);
  EXPECT_EQ(got.count, want.count);
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t u = 0; u < got.grads.size(); ++u)
    EXPECT_EQ(got.grads[u], want.grads[u]) << "unit " << u;
}

TEST(TransformerShape, AnotherShapeComputesAsAModelBuiltForIt) {
  const ModelConfig c = config();
  for (Recompute r : {Recompute::none, Recompute::block})
    for (bool fp8 : {false, true})
      for (int head_rows : {0, 5}) {
        SCOPED_TRACE(::testing::Message()
                     << "recompute " << int(r) << ", fp8 " << fp8 << ", head_rows " << head_rows);
        CpuOps ops;
        Transformer m(c, ops, kB, kT, r, fp8, head_rows);
        const int64_t bytes = m.activation_bytes();
        const Result own = train(m, kB, kT, 1);  // leaves its values in every buffer
        // A longer context in all the rows, one in fewer rows, the longest.
        for (auto [B, T] : {std::pair{2, 12}, std::pair{3, 5}, std::pair{1, 16}}) {
          SCOPED_TRACE(::testing::Message() << B << " x " << T);
          m.set_shape(B, T);
          EXPECT_EQ(m.batch_size(), B);
          EXPECT_EQ(m.seq_len(), T);
          EXPECT_EQ(m.output_of(0, false).numel, int64_t(B) * T * c.d_model);
          Transformer built(c, ops, B, T, r, fp8, head_rows);
          expect_same(train(m, B, T, 2), train(built, B, T, 2));
        }
        m.set_shape(kB, kT);
        expect_same(train(m, kB, kT, 1), own);
        EXPECT_EQ(m.activation_bytes(), bytes);  // reshaping allocates nothing
        EXPECT_EQ(m.capacity_rows(), kB * kT);
      }
}

TEST(TransformerShape, RefusesShapesThatDoNotFit) {
  const ModelConfig c = config();
  CpuOps ops;
  Transformer m(c, ops, kB, kT);
  EXPECT_THROW(m.set_shape(5, 6), Error);   // 30 rows of 24
  EXPECT_THROW(m.set_shape(1, 17), Error);  // past the model's context
  EXPECT_THROW(m.set_shape(0, 6), Error);
  EXPECT_THROW(m.set_shape(4, 0), Error);
  EXPECT_EQ(m.batch_size(), kB);  // a refused shape leaves the current one
  EXPECT_EQ(m.seq_len(), kT);
  m.set_shape(1, 8);
  EXPECT_THROW(m.keep_logits({8}), Error);  // rows of the current shape only
  EXPECT_NO_THROW(m.keep_logits({7}));
}

}  // namespace
}  // namespace fsdp
