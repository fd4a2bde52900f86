// The op table's cases for attention (see op_table.h): cuDNN's fused causal
// GQA forward and backward against the CPU reference's, with v packed or as
// the last columns of q|k|v rows, as the model reads it, and over documents
// (--document-mask) through cuDNN's ragged attention.
#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// --document-mask: the documents of B sequences of T tokens, each sequence's
// documents' lengths in `lengths` (cycled; a sequence's last document ends
// with it); empty: none.
DocumentsHost documents_of(int B, int T, const std::vector<int>& lengths) {
  DocumentsHost d;
  if (lengths.empty()) return d;
  std::vector<int32_t> tokens(size_t(B) * T, 1);
  constexpr int kEnd = 0;
  size_t j = 0;
  for (int b = 0; b < B; ++b)
    for (int t = lengths[j++ % lengths.size()] - 1; t < T - 1; t += lengths[j++ % lengths.size()])
      tokens[size_t(b) * T + t] = kEnd;
  find_documents(tokens.data(), B, T, kEnd, d);
  return d;
}

// ---- attention --------------------------------------------------------------
OpCase attention_case(int B, int T, int H, int Hkv, int hd, int64_t v_ld = 0,
                      const std::vector<int>& doc_lengths = {}) {
  const int64_t nq = int64_t(B) * T * H * hd, nkv = int64_t(B) * T * Hkv * hd;
  const int64_t nl = int64_t(B) * H * T, kv_width = int64_t(Hkv) * hd;
  if (v_ld == 0) v_ld = kv_width;
  // A strided v is the last columns of rows v_ld wide, as in the q|k|v GEMM's output.
  const int64_t nv = int64_t(B) * T * v_ld, vcol = v_ld - kv_width;
  OpCase c;
  c.op = "attention";
  c.shape = fmt("B=%d T=%d heads=%d kv_heads=%d head_dim=%d", B, T, H, Hkv, hd);
  const DocumentsHost docs = documents_of(B, T, doc_lengths);
  c.variant =
      v_ld == kv_width ? "causal" : fmt("causal, v and dv rows %lld apart", (long long)v_ld);
  if (!docs.first.empty()) c.variant += fmt(", %d documents (ragged)", int(docs.first.size() - 1));
  c.dtypes = "q,k,v,out,dout,dq,dk,dv bf16; lse f32";
  // Causal: half of each sequence's (document's) scores; forward 2 matmuls, backward 5.
  double pairs = double(B) * T * T / 2;
  if (!docs.first.empty()) {
    pairs = 0;
    for (size_t j = 0; j + 1 < docs.first.size(); ++j)
      pairs += double(docs.first[j + 1] - docs.first[j]) * (docs.first[j + 1] - docs.first[j]) / 2;
  }
  c.fwd_flops = 4.0 * H * pairs * hd;
  c.bwd_flops = 2.5 * c.fwd_flops;
  c.bind = [=](Env& e) {
    const auto q = e.rnd(nq, -2.0f, 2.0f), k = e.rnd(nkv, -2.0f, 2.0f), v = e.rnd(nv);
    const auto dout = e.rnd(nq), dv0 = e.rnd(nv);
    Tensor qt = e.in(BF, q), kt = e.in(BF, k), vw = e.in(BF, v);
    Tensor out = e.out(BF, nq), lse = e.out(F32, nl);
    Tensor dot = e.in(BF, dout), dq = e.out(BF, nq), dk = e.out(BF, nkv);
    // A wide dv starts from the same values on both sides and is compared
    // whole, so a write outside its view would show as an error of order 1.
    Tensor dvw = v_ld != kv_width ? e.in(BF, dv0) : e.out(BF, nkv);
    const Tensor vt = vw.slice(vcol, nv - vcol), dv = dvw.slice(vcol, dvw.numel - vcol);
    const Documents dt =
        docs.first.empty() ? Documents{} : Documents{e.tokens(docs.start), e.tokens(docs.first)};
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.attention(out, lse, qt, kt, vt, B, T, H, Hkv, hd, v_ld, dt); };
    b.fwd_checks = {vs_ref("attention out", out, kAttn), vs_ref("attention lse (f32)", lse, kF32)};
    // Backward from the same forward on both sides: the device's bf16 out and
    // its lse, given to the reference as well.
    b.from_dev = {out, lse};
    b.bwd = [=, &o] {
      o.attention_backward(dq, dk, dv, dot, out, lse, qt, kt, vt, B, T, H, Hkv, hd, v_ld, dt);
    };
    b.bwd_checks = {vs_ref("attention dq", dq, kAttn), vs_ref("attention dk", dk, kAttn),
                    vs_ref("attention dv", dvw, kAttn)};
    if (v_ld == kv_width) {
      b.loss = {{out, dot}};
      b.grads = {{"dq", qt, dq}, {"dk", kt, dk}, {"dv", vt, dv}};
    } else {
      b.no_gradient =
          "v a view into q|k|v rows: the packed case's gradient, as test_cpu_strided_ops shows";
    }
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "attention",
    [](std::vector<OpCase>& t) {
      // Grouped (4:2, 8:2) and plain (4:4) heads; head_dim 64, 16, 128.
      t.push_back(attention_case(2, 128, 4, 2, 64));
      t.push_back(attention_case(1, 64, 4, 4, 16));
      t.push_back(attention_case(2, 96, 8, 2, 128));
      // v inside a q|k|v row (4 + 2 * 2 heads of 64), and at gpt-350m's heads
      // (16 + 2 * 4 of 64): v's rows (q+2kv wide) are not k's (kv wide).
      t.push_back(attention_case(2, 128, 4, 2, 64, 8 * 64));
      t.push_back(attention_case(1, 256, 16, 4, 64, 24 * 64));
      // Heads wider than d_model / n_head (--head-dim), as Qwen3-0.6B's: 16 + 2 * 8
      // heads of 128, so q|k|v rows are 4096 wide.
      t.push_back(attention_case(1, 64, 16, 8, 128, 4096));
      // --document-mask (cuDNN's ragged attention): a one-token document, one
      // of 64, documents past a sequence's middle, and a sequence that is one
      // document; 5 documents run as 8 (3 empty), then 4 as exactly 4, with v
      // packed and inside q|k|v rows (gpt-350m's heads).
      t.push_back(attention_case(2, 128, 4, 2, 64, 0, {1, 30, 64, 33, 128}));
      t.push_back(attention_case(2, 128, 4, 2, 64, 8 * 64, {64, 64, 100, 28}));
      t.push_back(attention_case(1, 256, 16, 4, 64, 24 * 64, {7, 120, 1, 90}));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      t.push_back(attention_case(m.B, m.T, c.n_head, c.n_kv_head, c.head_dim(), m.qkv()));
      // Documents of a few hundred tokens, as web text's are.
      t.push_back(attention_case(m.B, m.T, c.n_head, c.n_kv_head, c.head_dim(), m.qkv(),
                                 {300, 700, 150, 900, 500}));
    });

}  // namespace fsdp::test
