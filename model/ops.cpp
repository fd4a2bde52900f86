// Ops' front door for memory, the model's ops and the optimizer: each op
// checks its arguments once (model/op_checks.h), reports itself to the hook
// with its nominal work, and runs the backend's do_ method. The FP8 ops are in
// ops_fp8.cpp.
#include <chrono>
#include <cmath>
#include <string>
#include <tuple>

#include "model/op_checks.h"

namespace fsdp {

using namespace op_checks;

// ---- timing -----------------------------------------------------------------

int Ops::do_mark() {
  host_marks_.push_back(std::chrono::steady_clock::now());
  return int(host_marks_.size()) - 1;
}
double Ops::do_seconds(int a, int b) {
  return std::chrono::duration<double>(host_marks_.at(size_t(b)) - host_marks_.at(size_t(a)))
      .count();
}
void Ops::do_clear_marks() {
  host_marks_.clear();
}
void Ops::clear_marks() {
  if (hook_) hook_->settle();  // before the marks it holds are recycled
  do_clear_marks();
}

// ---- memory -----------------------------------------------------------------

Tensor Ops::alloc(DType dtype, int64_t numel) {
  FSDP_CHECK(numel >= 0, "alloc of ", numel, " elements");
  return do_alloc(dtype, numel);
}
void Ops::free(Tensor t) {
  do_free(t);
}
void Ops::zero(Tensor t) {
  const OpScope scope(hook_, [&] { return OpCall{key("zero", {t.numel}), 0, double(t.bytes())}; });
  do_zero(t);
}
void Ops::copy(Tensor dst, Tensor src) {
  FSDP_CHECK(dst.dtype == src.dtype && dst.numel == src.numel, "copy ", dtype_name(src.dtype), "[",
             src.numel, "] to ", dtype_name(dst.dtype), "[", dst.numel, "]");
  const OpScope scope(hook_, [&] {
    return OpCall{key("copy", {dst.numel}), 0, 2.0 * double(dst.bytes())};
  });
  do_copy(dst, src);
}
void Ops::to_device(Tensor dst, const void* host) {
  const OpScope scope(hook_, [&] {
    return OpCall{key("to_device", {dst.numel}), 0, double(dst.bytes())};
  });
  do_to_device(dst, host);
}
void Ops::to_host(void* host, Tensor src) {
  const OpScope scope(hook_, [&] {
    return OpCall{key("to_host", {src.numel}), 0, double(src.bytes())};
  });
  do_to_host(host, src);
}

// ---- model ------------------------------------------------------------------

void Ops::embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) {
  FSDP_CHECK(C > 0, "embedding width ", C);
  act(*this, out, int64_t(n) * C, "embedding out");
  i32(tokens, n, "embedding tokens");
  act(*this, wte, C, "embedding wte");
  const OpScope scope(hook_, [&] {
    return OpCall{key("embedding", {n, C}), 0, double(n) * C * (esize(out) + esize(wte))};
  });
  do_embedding(out, tokens, wte, n, C);
}

void Ops::embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) {
  FSDP_CHECK(C > 0, "embedding width ", C);
  grad(*this, dwte, C, "embedding dwte");
  act(*this, dout, int64_t(n) * C, "embedding dout");
  i32(tokens, n, "embedding tokens");
  const OpScope scope(hook_, [&] {
    return OpCall{key("embedding_backward", {n, C}), 0,
                  double(n) * C * (esize(dout) + 2 * esize(dwte))};
  });
  do_embedding_backward(dwte, dout, tokens, n, C);
}

void Ops::rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                  Tensor amax) {
  const int64_t n = int64_t(rows) * dim;
  act(*this, y, n, "rmsnorm y");
  f32(rstd, rows, "rmsnorm rstd");
  act(*this, x, n, "rmsnorm x");
  act(*this, g, dim, "rmsnorm g");
  opt_f32(amax, 1, "rmsnorm amax");
  const OpScope scope(hook_, [&] {
    return OpCall{key(amax.numel ? "rmsnorm+amax" : "rmsnorm", {rows, dim}), 0,
                  double(n) * (esize(x) + esize(y))};
  });
  do_rmsnorm(y, rstd, x, g, rows, dim, eps, amax);
}

void Ops::rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                           int rows, int dim, bool accumulate_dx, Tensor amax) {
  const int64_t n = int64_t(rows) * dim;
  act(*this, dx, n, "rmsnorm dx");
  grad(*this, dg, dim, "rmsnorm dg");
  act(*this, dy, n, "rmsnorm dy");
  act(*this, x, n, "rmsnorm x");
  act(*this, g, dim, "rmsnorm g");
  f32(rstd, rows, "rmsnorm rstd");
  opt_f32(amax, 1, "rmsnorm_backward amax");
  const OpScope scope(hook_, [&] {
    const std::string op = std::string(accumulate_dx ? "rmsnorm_backward+=" : "rmsnorm_backward") +
                           (amax.numel ? "+amax" : "");
    return OpCall{key(op.c_str(), {rows, dim}), 0,
                  double(n) * (esize(dy) + esize(x) + esize(dx) * (accumulate_dx ? 2 : 1))};
  });
  do_rmsnorm_backward(dx, dg, dy, x, g, rstd, rows, dim, accumulate_dx, amax);
}

void Ops::linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) {
  act(*this, y, int64_t(M) * N, "linear y");
  act(*this, x, int64_t(M) * K, "linear x");
  act(*this, w, int64_t(N) * K, "linear w");
  const OpScope scope(hook_, [&] { return OpCall{key("linear", {M, N, K}), 2.0 * M * N * K, 0}; });
  do_linear(y, x, w, M, N, K);
}

void Ops::linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N, int K,
                          bool accumulate_dx) {
  const bool with_dx = dx.numel > 0;
  act(*this, dy, int64_t(M) * N, "linear dy");
  if (with_dx) {
    act(*this, dx, int64_t(M) * K, "linear dx");
    act(*this, w, int64_t(N) * K, "linear w");
  }
  grad(*this, dw, int64_t(N) * K, "linear dw");
  act(*this, x, int64_t(M) * K, "linear x");
  const OpScope scope(hook_, [&] {
    return OpCall{key(with_dx ? "linear_backward" : "linear_backward(dw)", {M, N, K}),
                  (with_dx ? 4.0 : 2.0) * M * N * K, 0};
  });
  do_linear_backward(dx, dw, dy, x, w, M, N, K, accumulate_dx);
}

void Ops::linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) {
  act(*this, y, int64_t(M) * N, "linear_add y");
  act(*this, x, int64_t(M) * K, "linear_add x");
  act(*this, w, int64_t(N) * K, "linear_add w");
  act(*this, r, int64_t(M) * N, "linear_add r");
  const OpScope scope(hook_, [&] {
    return OpCall{key("linear_add", {M, N, K}), 2.0 * M * N * K, 0};
  });
  do_linear_add(y, x, w, r, M, N, K);
}

void Ops::rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) {
  FSDP_CHECK(head_dim % 2 == 0, "rope needs an even head_dim, got ", head_dim);
  const int64_t n = int64_t(B) * T * heads * head_dim;
  act(*this, x, n, "rope x");
  const OpScope scope(hook_, [&] {
    return OpCall{key("rope", {B * T, heads, head_dim}), 0, 2.0 * double(n) * esize(x)};
  });
  do_rope(x, B, T, heads, head_dim, rope);
}

void Ops::rope_backward(Tensor dx, int B, int T, int heads, int head_dim, const Rope& rope) {
  FSDP_CHECK(head_dim % 2 == 0, "rope needs an even head_dim, got ", head_dim);
  const int64_t n = int64_t(B) * T * heads * head_dim;
  act(*this, dx, n, "rope dx");
  const OpScope scope(hook_, [&] {
    return OpCall{key("rope_backward", {B * T, heads, head_dim}), 0, 2.0 * double(n) * esize(dx)};
  });
  do_rope_backward(dx, B, T, heads, head_dim, rope);
}

void Ops::norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                    int head_dim, float eps, const Rope& rope, int64_t x_ld) {
  FSDP_CHECK(head_dim % 2 == 0, "norm_rope needs an even head_dim, got ", head_dim);
  const int rows = B * T * heads;
  const int64_t n = int64_t(rows) * head_dim, tokens = int64_t(B) * T;
  act(*this, y, n, "norm_rope y");
  act(*this, x, rows_need(tokens, int64_t(heads) * head_dim, x_ld), "norm_rope x");
  // No gain: no normalization (a model without QK-norm), only the rotation
  // of x's rows into y; rstd is then not written and must be empty.
  const bool norm = g.numel > 0;
  if (norm) {
    f32(rstd, rows, "norm_rope rstd");
    act(*this, g, head_dim, "norm_rope g");
  } else {
    FSDP_CHECK(rstd.numel == 0, "norm_rope without a gain writes no rstd");
  }
  const OpScope scope(hook_, [&] {
    return OpCall{key(norm ? "norm_rope" : "norm_rope (no norm)", {B * T, heads, head_dim}), 0,
                  2.0 * double(n) * esize(x)};
  });
  do_norm_rope(y, rstd, x, g, B, T, heads, head_dim, eps, rope, x_ld);
}

void Ops::norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                             int B, int T, int heads, int head_dim, const Rope& rope, Tensor amax,
                             int64_t x_ld) {
  FSDP_CHECK(head_dim % 2 == 0, "norm_rope needs an even head_dim, got ", head_dim);
  const int rows = B * T * heads;
  const int64_t n = int64_t(rows) * head_dim, tokens = int64_t(B) * T;
  const int64_t need_x = rows_need(tokens, int64_t(heads) * head_dim, x_ld);
  act(*this, dx, need_x, "norm_rope dx");
  act(*this, dy, n, "norm_rope dy");
  act(*this, x, need_x, "norm_rope x");
  const bool norm = g.numel > 0;  // as in norm_rope: no gain, the rotation alone
  if (norm) {
    grad(*this, dg, head_dim, "norm_rope dg");
    act(*this, g, head_dim, "norm_rope g");
    f32(rstd, rows, "norm_rope rstd");
    opt_f32(amax, 1, "norm_rope_backward amax");
  } else {
    FSDP_CHECK(dg.numel == 0 && rstd.numel == 0 && amax.numel == 0,
               "norm_rope_backward without a gain takes no dg, rstd or amax");
  }
  const OpScope scope(hook_, [&] {
    return OpCall{key(!norm        ? "norm_rope_backward (no norm)"
                      : amax.numel ? "norm_rope_backward+amax"
                                   : "norm_rope_backward",
                      {B * T, heads, head_dim}),
                  0, 3.0 * double(n) * esize(dy)};
  });
  do_norm_rope_backward(dx, dg, dy, x, g, rstd, B, T, heads, head_dim, rope, amax, x_ld);
}

namespace {
void check_heads(int n_head, int n_kv_head) {
  FSDP_CHECK(n_kv_head > 0 && n_head % n_kv_head == 0, "n_head ", n_head, " n_kv_head ", n_kv_head);
}
// --document-mask: a start per token and, for the CUDA path, between one
// document per sequence and one per token, each with its first token.
void documents(const Documents& docs, int B, int T) {
  if (docs.empty()) return;
  i32(docs.start, int64_t(B) * T, "attention document starts");
  FSDP_CHECK(docs.count() >= B && int64_t(docs.count()) <= int64_t(B) * T,
             "attention: ", docs.count(), " documents in ", B, " sequences of ", T, " tokens");
  i32(docs.first, docs.count() + 1, "attention documents' first tokens");
}
}  // namespace

// Causal attention: half the T x T score matrix, two GEMMs forward (QK^T, PV)
// and five backward (as FlashAttention counts them).
void Ops::attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T, int n_head,
                    int n_kv_head, int head_dim, int64_t v_ld, const Documents& docs) {
  check_heads(n_head, n_kv_head);
  const int64_t nq = int64_t(B) * T * n_head * head_dim;
  const int64_t nkv = int64_t(B) * T * n_kv_head * head_dim;
  act(*this, out, nq, "attention out");
  f32(lse, int64_t(B) * n_head * T, "attention lse");
  act(*this, q, nq, "attention q");
  act(*this, k, nkv, "attention k");
  act(*this, v, rows_need(int64_t(B) * T, int64_t(n_kv_head) * head_dim, v_ld), "attention v");
  documents(docs, B, T);
  const OpScope scope(hook_, [&] {
    return OpCall{key("attention", {B, T, n_head, n_kv_head, head_dim}),
                  2.0 * B * n_head * double(T) * T * head_dim, 0};
  });
  do_attention(out, lse, q, k, v, B, T, n_head, n_kv_head, head_dim, v_ld, docs);
}

void Ops::attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out, Tensor lse,
                             Tensor q, Tensor k, Tensor v, int B, int T, int n_head, int n_kv_head,
                             int head_dim, int64_t v_ld, const Documents& docs) {
  check_heads(n_head, n_kv_head);
  const int64_t nq = int64_t(B) * T * n_head * head_dim;
  const int64_t nkv = int64_t(B) * T * n_kv_head * head_dim;
  const int64_t nv = rows_need(int64_t(B) * T, int64_t(n_kv_head) * head_dim, v_ld);
  act(*this, dq, nq, "attention dq");
  act(*this, dk, nkv, "attention dk");
  act(*this, dv, nv, "attention dv");
  act(*this, dout, nq, "attention dout");
  act(*this, out, nq, "attention out");
  f32(lse, int64_t(B) * n_head * T, "attention lse");
  act(*this, q, nq, "attention q");
  act(*this, k, nkv, "attention k");
  act(*this, v, nv, "attention v");
  documents(docs, B, T);
  const OpScope scope(hook_, [&] {
    return OpCall{key("attention_backward", {B, T, n_head, n_kv_head, head_dim}),
                  5.0 * B * n_head * double(T) * T * head_dim, 0};
  });
  do_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, B, T, n_head, n_kv_head, head_dim,
                        v_ld, docs);
}

void Ops::swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld, Tensor amax) {
  const int64_t n = int64_t(rows) * cols, need_ab = rows_need(rows, cols, ab_ld);
  act(*this, s, n, "swiglu s");
  act(*this, a, need_ab, "swiglu a");
  act(*this, b, need_ab, "swiglu b");
  opt_f32(amax, 1, "swiglu amax");
  const OpScope scope(hook_, [&] {
    return OpCall{key(amax.numel ? "swiglu+amax" : "swiglu", {rows, cols}), 0,
                  3.0 * double(n) * esize(s)};
  });
  do_swiglu(s, a, b, rows, cols, ab_ld, amax);
}

void Ops::swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows, int cols,
                          int64_t ab_ld, Tensor amax) {
  const int64_t n = int64_t(rows) * cols, need_ab = rows_need(rows, cols, ab_ld);
  act(*this, da, need_ab, "swiglu da");
  act(*this, db, need_ab, "swiglu db");
  act(*this, ds, n, "swiglu ds");
  act(*this, a, need_ab, "swiglu a");
  act(*this, b, need_ab, "swiglu b");
  opt_f32(amax, 1, "swiglu_backward amax");
  const OpScope scope(hook_, [&] {
    return OpCall{key(amax.numel ? "swiglu_backward+amax" : "swiglu_backward", {rows, cols}), 0,
                  5.0 * double(n) * esize(ds)};
  });
  do_swiglu_backward(da, db, ds, a, b, rows, cols, ab_ld, amax);
}

void Ops::relu2(Tensor s, Tensor a, int64_t n, Tensor amax) {
  act(*this, s, n, "relu2 s");
  act(*this, a, n, "relu2 a");
  opt_f32(amax, 1, "relu2 amax");
  const OpScope scope(hook_, [&] {
    return OpCall{key(amax.numel ? "relu2+amax" : "relu2", {n}), 0, 2.0 * double(n) * esize(s)};
  });
  do_relu2(s, a, n, amax);
}

void Ops::relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax) {
  act(*this, da, n, "relu2 da");
  act(*this, ds, n, "relu2 ds");
  act(*this, a, n, "relu2 a");
  opt_f32(amax, 1, "relu2_backward amax");
  const OpScope scope(hook_, [&] {
    return OpCall{key(amax.numel ? "relu2_backward+amax" : "relu2_backward", {n}), 0,
                  3.0 * double(n) * esize(ds)};
  });
  do_relu2_backward(da, ds, a, n, amax);
}

void Ops::value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld, bool first) {
  const int64_t n = int64_t(rows) * cols;
  act(*this, v, rows_need(rows, cols, v_ld), "value_residual v");
  act(*this, v0, n, "value_residual v0");
  const OpScope scope(hook_, [&] {
    return OpCall{key(first ? "value_residual first" : "value_residual", {rows, cols}), 0,
                  (first ? 2.0 : 3.0) * double(n) * esize(v)};
  });
  do_value_residual(v, v0, rows, cols, v_ld, first);
}

void Ops::value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld,
                                  bool first, bool accumulate) {
  FSDP_CHECK(!(first && accumulate), "value_residual_backward: the first block accumulates none");
  const int64_t n = int64_t(rows) * cols;
  act(*this, dv, rows_need(rows, cols, v_ld), "value_residual dv");
  act(*this, dv0, n, "value_residual dv0");
  const OpScope scope(hook_, [&] {
    const char* k = first        ? "value_residual_backward first"
                    : accumulate ? "value_residual_backward+="
                                 : "value_residual_backward";
    // first and accumulate read both and write one; otherwise one read, two writes.
    return OpCall{key(k, {rows, cols}), 0, (accumulate ? 4.0 : 3.0) * double(n) * esize(dv)};
  });
  do_value_residual_backward(dv, dv0, rows, cols, v_ld, first, accumulate);
}

void Ops::skip_add(Tensor x, Tensor s, Tensor w, int64_t n) {
  act(*this, x, n, "skip_add x");
  act(*this, s, n, "skip_add s");
  act(*this, w, 1, "skip_add w");
  FSDP_CHECK(!overlap(x, s, n), "skip_add: x overlaps s");
  const OpScope scope(hook_, [&] {
    return OpCall{key("skip_add", {n}), 0, 3.0 * double(n) * esize(x)};
  });
  do_skip_add(x, s, w, n);
}

void Ops::skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w, int64_t n) {
  act(*this, ds, n, "skip_add ds");
  grad(*this, dw, 1, "skip_add dw");
  act(*this, dx, n, "skip_add dx");
  act(*this, s, n, "skip_add s");
  act(*this, w, 1, "skip_add w");
  // dx passes on unchanged, and ds is written as dx and s are read.
  FSDP_CHECK(!overlap(ds, dx, n), "skip_add_backward: ds overlaps dx");
  FSDP_CHECK(!overlap(ds, s, n), "skip_add_backward: ds overlaps s");
  const OpScope scope(hook_, [&] {
    return OpCall{key("skip_add_backward", {n}), 0, 3.0 * double(n) * esize(dx)};
  });
  do_skip_add_backward(ds, dw, dx, s, w, n);
}

void Ops::value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols,
                          int64_t v_ld) {
  FSDP_CHECK(rows >= 0 && cols >= 0 && v_ld >= cols, "value_embed_mix: rows ", rows, ", cols ",
             cols, ", v_ld ", v_ld);
  const int64_t n = int64_t(rows) * cols, nv = rows_need(rows, cols, v_ld);
  act(*this, v, nv, "value_embed_mix v");
  act(*this, v_in, n, "value_embed_mix v_in");
  act(*this, e, n, "value_embed_mix e");
  act(*this, w, 2, "value_embed_mix w");
  // v_in is written as v and e are read.
  FSDP_CHECK(!overlap(v_in, n, v, nv), "value_embed_mix: v_in overlaps v");
  FSDP_CHECK(!overlap(v_in, e, n), "value_embed_mix: v_in overlaps e");
  FSDP_CHECK(!overlap(v, nv, e, n), "value_embed_mix: v overlaps e");
  const OpScope scope(hook_, [&] {
    return OpCall{key("value_embed_mix", {rows, cols}), 0, 4.0 * double(n) * esize(v)};
  });
  do_value_embed_mix(v, v_in, e, w, rows, cols, v_ld);
}

void Ops::value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e, Tensor w,
                                   int rows, int cols, int64_t v_ld, bool accumulate) {
  FSDP_CHECK(rows >= 0 && cols >= 0 && v_ld >= cols, "value_embed_mix_backward: rows ", rows,
             ", cols ", cols, ", v_ld ", v_ld);
  const int64_t n = int64_t(rows) * cols, nv = rows_need(rows, cols, v_ld);
  act(*this, dv, nv, "value_embed_mix dv");
  act(*this, de, n, "value_embed_mix de");
  grad(*this, dw, 2, "value_embed_mix dw");
  act(*this, v_in, n, "value_embed_mix v_in");
  act(*this, e, n, "value_embed_mix e");
  act(*this, w, 2, "value_embed_mix w");
  // dv and de are written as v_in and e are read.
  for (auto [t, m, what] : {std::tuple{dv, nv, "dv"}, std::tuple{de, n, "de"}}) {
    FSDP_CHECK(!overlap(t, m, v_in, n), "value_embed_mix_backward: ", what, " overlaps v_in");
    FSDP_CHECK(!overlap(t, m, e, n), "value_embed_mix_backward: ", what, " overlaps e");
  }
  FSDP_CHECK(!overlap(dv, nv, de, n), "value_embed_mix_backward: dv overlaps de");
  const OpScope scope(hook_, [&] {
    return OpCall{
        key(accumulate ? "value_embed_mix_backward+=" : "value_embed_mix_backward", {rows, cols}),
        0, (accumulate ? 6.0 : 5.0) * double(n) * esize(dv)};
  });
  do_value_embed_mix_backward(dv, de, dw, v_in, e, w, rows, cols, v_ld, accumulate);
}

void Ops::add(Tensor y, Tensor a, Tensor b, int64_t n) {
  act(*this, y, n, "add y");
  act(*this, a, n, "add a");
  act(*this, b, n, "add b");
  const OpScope scope(hook_, [&] {
    return OpCall{key("add", {n}), 0, 3.0 * double(n) * esize(y)};
  });
  do_add(y, a, b, n);
}

void Ops::cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                        float grad_scale, HeadLoss extra) {
  FSDP_CHECK(V > 0 && Vp >= V, "vocab ", V, " padded to ", Vp);
  FSDP_CHECK(std::isfinite(extra.softcap) && extra.softcap >= 0, "softcap ", extra.softcap);
  FSDP_CHECK(std::isfinite(extra.z_loss) && extra.z_loss >= 0, "z_loss ", extra.z_loss);
  f32(losses, n, "cross_entropy losses");
  act(*this, logits, int64_t(n) * Vp, "cross_entropy logits");
  i32(targets, n, "cross_entropy targets");
  const OpScope scope(hook_, [&] {
    // A cap or a z term is its own row in a profile: tanh costs time.
    std::string name = grad_scale != 0 ? "cross_entropy+grad" : "cross_entropy";
    if (extra.softcap > 0) name += "+cap";
    if (extra.z_loss > 0) name += "+z";
    return OpCall{key(name.c_str(), {n, Vp}), 0,
                  double(n) * Vp * esize(logits) * (grad_scale != 0 ? 2 : 1)};
  });
  do_cross_entropy(losses, logits, targets, n, V, Vp, grad_scale, extra);
}

// ---- optimizer and engine ---------------------------------------------------

void Ops::cast(Tensor dst, Tensor src) {
  FSDP_CHECK(dst.numel == src.numel, "cast ", src.numel, " elements into ", dst.numel);
  FSDP_CHECK(floating(dst.dtype) && floating(src.dtype), "cast is for f32/bf16 only");
  const OpScope scope(hook_, [&] {
    return OpCall{std::string("cast ") + dtype_name(src.dtype) + "->" + dtype_name(dst.dtype) +
                      " " + std::to_string(dst.numel),
                  0, double(dst.bytes()) + double(dst.numel) * esize(src)};
  });
  do_cast(dst, src);
}

void Ops::accumulate(Tensor dst, Tensor src, float scale) {
  f32(dst, 0, "accumulate dst");
  // A bf16 source is accepted too: on a device it is what reduce-scatter of
  // low-precision gradients delivers.
  floating(src, "accumulate src");
  FSDP_CHECK(src.numel >= dst.numel, "accumulate ", src.numel, " elements into ", dst.numel);
  const OpScope scope(hook_, [&] {
    return OpCall{key("accumulate", {dst.numel}), 0,
                  2.0 * double(dst.bytes()) + double(src.bytes())};
  });
  do_accumulate(dst, src, scale);
}

double Ops::sum_squares(Tensor x) {
  f32(x, 0, "sum_squares x");
  const OpScope scope(hook_, [&] {
    return OpCall{key("sum_squares", {x.numel}), 0, double(x.bytes())};
  });
  return do_sum_squares(x);  // the scope ends after the sum is read
}

void Ops::sum_squares_each(Tensor out, const std::vector<Tensor>& xs) {
  f32(out, int64_t(xs.size()), "sum_squares_each out");
  for (Tensor x : xs) f32(x, 0, "sum_squares_each x");
  const OpScope scope(hook_, [&] { return each_call("sum_squares_each", xs); });
  do_sum_squares_each(out, xs);
}
void Ops::do_sum_squares_each(Tensor out, const std::vector<Tensor>& xs) {
  std::vector<float> v(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) v[i] = float(do_sum_squares(xs[i]));
  do_to_device(out.slice(0, int64_t(v.size())), v.data());
}

void Ops::adamw(Tensor param, Tensor grad_t, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) {
  FSDP_CHECK(h.step >= 1, "adamw step counts from 1, got ", h.step);
  const int64_t n = param.numel;
  f32(param, n, "adamw param");
  f32(grad_t, n, "adamw grad");
  f32(exp_avg, n, "adamw exp_avg");
  f32(exp_avg_sq, n, "adamw exp_avg_sq");
  if (send.numel > 0) {
    floating(send, "adamw send");
    need(send, n, "adamw send");
  }
  int64_t done = 0;
  for (const AdamWSpan& sp : spans) {
    FSDP_CHECK(sp.begin >= done && sp.count >= 0 && sp.begin + sp.count <= n,
               "adamw spans must be sorted, disjoint and inside the shard of ", n);
    done = sp.begin + sp.count;
  }
  const OpScope scope(hook_, [&] {
    const double bytes = 2.0 * double(param.bytes() + exp_avg.bytes() + exp_avg_sq.bytes()) +
                         double(grad_t.bytes()) * (clear_grad ? 2 : 1) + double(send.bytes());
    return OpCall{key("adamw", {n}), 0, bytes};
  });
  do_adamw(param, grad_t, exp_avg, exp_avg_sq, send, spans, h, clear_grad);
}

}  // namespace fsdp
