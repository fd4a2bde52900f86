// The op table's cases for the embedding (see op_table.h): the gather and
// its scatter-add backward, with colliding rows.
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- embedding --------------------------------------------------------------
// few_tokens: only 10 distinct ids (0, 7, ..., 63), so the backward's
// scatter-add has many rows colliding on one dwte row.
OpCase embedding_case(int V, int n, int C, DType dwt, bool few_tokens) {
  FSDP_CHECK(!few_tokens || V > 63);
  OpCase c;
  c.op = "embedding";
  c.shape = fmt("V=%d n=%d C=%d", V, n, C);
  c.variant = std::string("dwte ") + dtype_name(dwt) + (few_tokens ? ", 10 distinct tokens" : "");
  c.dtypes = std::string("wte,out,dout bf16; tokens i32; dwte ") + dtype_name(dwt);
  c.fwd_bytes = 2.0 * n * C * 2 + 4.0 * n;  // read n rows, write them, read the ids
  c.bwd_bytes = 2.0 * n * C + 2.0 * n * C * double(dtype_size(dwt)) + 4.0 * n;
  c.bind = [=](Env& e) {
    std::uniform_int_distribution<int> pick(0, few_tokens ? 9 : V - 1);
    std::vector<int32_t> tok(static_cast<size_t>(n));
    for (auto& t : tok) t = few_tokens ? pick(e.rng) * 7 : pick(e.rng);
    const auto w = e.rnd(int64_t(V) * C), d = e.rnd(int64_t(n) * C), dw0 = e.rnd(int64_t(V) * C);
    Tensor tt = e.tokens(tok), wt = e.in(BF, w), out = e.out(BF, int64_t(n) * C);
    Tensor dout = e.in(BF, d), dw = e.in(dwt, dw0);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.embedding(out, tt, wt, n, C); };
    b.fwd_checks = {vs_ref("embedding out (a gather is exact)", out, kBitwise)};
    b.bwd = [=, &o] { o.embedding_backward(dw, dout, tt, n, C); };
    b.bwd_checks = {dwt == BF ? vs_ref("embedding dwte (bf16, +=)", dw, kRound)
                              : vs_ref("embedding dwte (f32, +=)", dw, kF32Exact)};
    b.loss = {{out, dout}};
    b.grads = {{"dwte", wt, dw, /*added=*/true}};
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "embedding",
    [](std::vector<OpCase>& t) {
      // C = 36: the unvectorised path.
      for (int C : {64, 1024, 36})
        for (DType dwt : {BF, F32}) t.push_back(embedding_case(97, 300, C, dwt, true));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      t.push_back(embedding_case(m.c.vocab_size, m.M(), m.c.d_model, BF, false));
    });

}  // namespace fsdp::test
