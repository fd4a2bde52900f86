#include "model/cpu/cpu_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include "model/cpu/host_memory.h"

namespace fsdp {
namespace {

void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows,
               int64_t width) {
  for (int64_t r = 0; r < rows; ++r) std::copy_n(src + r * src_ld, width, dst + r * dst_ld);
}

// Four partial sums break the chain of dependent additions (attention is
// mostly short dot products); their order is fixed, so results stay
// reproducible.
double dot(const float* a, const float* b, int n) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int i = 0;
  for (; i + 4 <= n; i += 4)
    for (int l = 0; l < 4; ++l) s[l] += double(a[i + l]) * double(b[i + l]);
  for (; i < n; ++i) s[0] += double(a[i]) * double(b[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

double sigmoid(double a) {
  return 1.0 / (1.0 + std::exp(-a));
}

// cos and sin of t * rope_inv_freq(i) for t < T, i < head_dim/2, built in
// double once per call so every head and batch row shares exactly one value.
struct RopeTable {
  std::vector<double> cos, sin;
  RopeTable(int T, int head_dim, const Rope& rope) {
    const int half = head_dim / 2;
    cos.resize(size_t(T) * half);
    sin.resize(size_t(T) * half);
    for (int i = 0; i < half; ++i) {
      const double inv_freq = rope_inv_freq(rope, i, head_dim);
      for (int t = 0; t < T; ++t) {
        cos[size_t(t) * half + i] = std::cos(t * inv_freq);
        sin[size_t(t) * half + i] = std::sin(t * inv_freq);
      }
    }
  }
};

// Rotates each pair (x[i], x[i + half]) by sign * angle; sign -1 is the
// transpose, which is what backward needs because a rotation is orthogonal.
void rotate(Tensor xt, int B, int T, int heads, int head_dim, const Rope& rope, double sign) {
  float* x = xt.f32();
  const int half = head_dim / 2;
  const RopeTable table(T, head_dim, rope);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const double* c = &table.cos[size_t(t) * half];
      const double* s = &table.sin[size_t(t) * half];
      for (int h = 0; h < heads; ++h) {
        float* v = x + ((int64_t(b) * T + t) * heads + h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const double lo = v[i], hi = v[i + half];
          v[i] = float(lo * c[i] - hi * sign * s[i]);
          v[i + half] = float(hi * c[i] + lo * sign * s[i]);
        }
      }
    }
}

}  // namespace

// ---- memory -----------------------------------------------------------------

int64_t CpuOps::free_memory_bytes() const {
  return host_free_memory_bytes();
}

Tensor CpuOps::do_alloc(DType dtype, int64_t numel) {
  if (numel == 0) return {nullptr, dtype, 0};
  // 64-byte alignment keeps rows cache-line aligned for BLAS and matches what
  // device allocators guarantee; aligned_alloc wants a multiple of the alignment.
  const size_t bytes = (size_t(numel) * dtype_size(dtype) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw_error("cpu backend: out of memory allocating ", bytes, " bytes");
  return {p, dtype, numel};
}

void CpuOps::do_free(Tensor t) {
  std::free(t.data);
}

void CpuOps::do_zero(Tensor t) {
  if (t.numel > 0) std::memset(t.data, 0, t.bytes());
}

void CpuOps::do_copy(Tensor dst, Tensor src) {
  if (dst.numel > 0 && dst.data != src.data) std::memmove(dst.data, src.data, dst.bytes());
}

void CpuOps::do_to_device(Tensor dst, const void* host) {
  if (dst.numel > 0) std::memcpy(dst.data, host, dst.bytes());
}

void CpuOps::do_to_host(void* host, Tensor src) {
  if (src.numel > 0) std::memcpy(host, src.data, src.bytes());
}

// ---- model ------------------------------------------------------------------

void CpuOps::do_embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) {
  float* o = out.f32();
  const int32_t* tok = tokens.i32();
  const float* w = wte.f32();
  const int64_t vocab = wte.numel / C;
  for (int i = 0; i < n; ++i) {
    FSDP_CHECK(tok[i] >= 0 && tok[i] < vocab, "token ", tok[i], " outside vocab ", vocab);
    std::memcpy(o + int64_t(i) * C, w + int64_t(tok[i]) * C, sizeof(float) * C);
  }
}

void CpuOps::do_embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) {
  float* dw = dwte.f32();
  const float* d = dout.f32();
  const int32_t* tok = tokens.i32();
  const int64_t vocab = dwte.numel / C;
  // Rows are visited in token order, so repeated tokens sum in a fixed order.
  for (int i = 0; i < n; ++i) {
    FSDP_CHECK(tok[i] >= 0 && tok[i] < vocab, "token ", tok[i], " outside vocab ", vocab);
    float* row = dw + int64_t(tok[i]) * C;
    for (int c = 0; c < C; ++c) row[c] += d[int64_t(i) * C + c];
  }
}

void CpuOps::do_rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                        Tensor amax) {
  const int64_t n = int64_t(rows) * dim;
  float* yo = y.f32();
  float* r = rstd.f32();
  const float* xi = x.f32();
  const float* gi = g.f32();
  for (int row = 0; row < rows; ++row) {
    const float* xr = xi + int64_t(row) * dim;
    const double rs = 1.0 / std::sqrt(dot(xr, xr, dim) / dim + eps);
    // Backward uses the stored f32 rstd, so the forward uses the same rounded
    // value: forward and backward then describe one function.
    r[row] = float(rs);
    float* yr = yo + int64_t(row) * dim;
    for (int i = 0; i < dim; ++i) yr[i] = float(double(xr[i]) * r[row] * gi[i]);
  }
  if (amax.numel > 0) CpuOps::do_amax(amax.slice(0, 1), y.slice(0, n));
}

void CpuOps::do_rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                 int rows, int dim, bool accumulate_dx, Tensor amax) {
  const int64_t n = int64_t(rows) * dim;
  float* dxo = dx.f32();
  float* dgo = dg.f32();
  const float* dyi = dy.f32();
  const float* xi = x.f32();
  const float* gi = g.f32();
  const float* r = rstd.f32();
  for (int row = 0; row < rows; ++row) {
    const float* xr = xi + int64_t(row) * dim;
    const float* dyr = dyi + int64_t(row) * dim;
    float* dxr = dxo + int64_t(row) * dim;
    const double rs = r[row];
    // y_i = x_i r g_i with r = (mean(x^2) + eps)^-1/2 and dr/dx_j = -r^3 x_j / dim, so
    // dx_j = r (dy_j g_j - x_j r^2 mean_i(dy_i g_i x_i)).
    double dyg_x = 0.0;
    for (int i = 0; i < dim; ++i) dyg_x += double(dyr[i]) * gi[i] * xr[i];
    const double c = rs * rs * dyg_x / dim;
    // Each element of dy is read before the same element of dx is written, so
    // dx may alias dy.
    for (int i = 0; i < dim; ++i) {
      const double d = double(dyr[i]);
      dgo[i] += float(d * xr[i] * rs);
      const float v = float(rs * (d * gi[i] - xr[i] * c));
      dxr[i] = accumulate_dx ? dxr[i] + v : v;
    }
  }
  if (amax.numel > 0) CpuOps::do_amax(amax.slice(0, 1), dx.slice(0, n));
}

void CpuOps::do_linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) {
  float* yo = y.f32();
  const float* xi = x.f32();
  const float* wi = w.f32();
  if (M == 0 || N == 0) return;
  // y[M,N] = x[M,K] w[N,K]^T; beta 0 means y is never read, so garbage in y is fine.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, xi, K, wi, K, 0.0f, yo, N);
}

void CpuOps::do_linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N,
                                int K, bool accumulate_dx) {
  const float* dyi = dy.f32();
  if (dx.numel > 0) {
    float* dxo = dx.f32();
    const float* wi = w.f32();
    if (M > 0 && K > 0)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, K, N, 1.0f, dyi, N, wi, K,
                  accumulate_dx ? 1.0f : 0.0f, dxo, K);
  }
  float* dwo = dw.f32();
  const float* xi = x.f32();
  // dw[N,K] += dy[M,N]^T x[M,K]
  if (N > 0 && K > 0)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, N, K, M, 1.0f, dyi, N, xi, K, 1.0f, dwo,
                K);
}

void CpuOps::do_linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) {
  const int64_t n = int64_t(M) * N;
  float* yo = y.f32();
  const float* ri = r.f32();
  // The product goes to a temporary first: r may alias y, and linear's beta 0
  // would overwrite it before it is read.
  std::vector<float> tmp(static_cast<size_t>(n));
  CpuOps::do_linear({tmp.data(), DType::f32, n}, x, w, M, N, K);
  for (int64_t i = 0; i < n; ++i) yo[i] = tmp[size_t(i)] + ri[i];
}

void CpuOps::do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) {
  rotate(x, B, T, heads, head_dim, rope, +1.0);
}

void CpuOps::do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim, const Rope& rope) {
  rotate(dx, B, T, heads, head_dim, rope, -1.0);
}

// Strided rows (x_ld) are packed into a copy first and unpacked after, so the
// reference stays the plain composition.
void CpuOps::do_norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                          int head_dim, float eps, const Rope& rope, int64_t x_ld) {
  const int64_t tokens = int64_t(B) * T, width = int64_t(heads) * head_dim;
  if (g.numel == 0) {  // no QK-norm: the rotation alone
    copy_rows(y.f32(), width, x.f32(), x_ld, tokens, width);
    CpuOps::do_rope(y, B, T, heads, head_dim, rope);
    return;
  }
  std::vector<float> packed(size_t(tokens * width));
  copy_rows(packed.data(), width, x.f32(), x_ld, tokens, width);
  CpuOps::do_rmsnorm(y, rstd, {packed.data(), DType::f32, tokens * width}, g, B * T * heads,
                     head_dim, eps, {});
  CpuOps::do_rope(y, B, T, heads, head_dim, rope);
}

void CpuOps::do_norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                   int B, int T, int heads, int head_dim, const Rope& rope,
                                   Tensor amax, int64_t x_ld) {
  const int rows = B * T * heads;
  const int64_t n = int64_t(rows) * head_dim, tokens = int64_t(B) * T;
  const int64_t width = int64_t(heads) * head_dim;
  const float* dyi = dy.f32();
  // Rotated back in a copy, so the caller's dy stays as it was.
  std::vector<float> tmp(dyi, dyi + n), xp(static_cast<size_t>(n)), dxp(static_cast<size_t>(n));
  const Tensor d{tmp.data(), DType::f32, n};
  CpuOps::do_rope_backward(d, B, T, heads, head_dim, rope);
  if (g.numel == 0) {  // no QK-norm: dx is dy rotated back
    copy_rows(dx.f32(), x_ld, tmp.data(), width, tokens, width);
    return;
  }
  copy_rows(xp.data(), width, x.f32(), x_ld, tokens, width);
  CpuOps::do_rmsnorm_backward({dxp.data(), DType::f32, n}, dg, d, {xp.data(), DType::f32, n}, g,
                              rstd, rows, head_dim, false, amax);
  copy_rows(dx.f32(), x_ld, dxp.data(), width, tokens, width);
}

namespace {
// --document-mask: the first key row t of sequence b may attend to (0: the
// causal mask alone).
struct KeyStart {
  const int32_t* doc_start;  // null: none
  int T;
  int operator()(int b, int t) const {
    if (!doc_start) return 0;
    const int s = doc_start[int64_t(b) * T + t];
    FSDP_CHECK(s >= 0 && s <= t, "attention document start ", s, " at position ", t,
               " of sequence ", b, ": a document starts at or before its tokens");
    return s;
  }
};
}  // namespace

void CpuOps::do_attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                          int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                          const Documents& docs) {
  const KeyStart first{docs.empty() ? nullptr : docs.start.i32(), T};
  float* o = out.f32();
  float* l = lse.f32();
  const float* qi = q.f32();
  const float* ki = k.f32();
  const float* vi = v.f32();
  const int group = n_head / n_kv_head;
  const double scale = 1.0 / std::sqrt(double(head_dim));
  std::vector<double> s(T), acc(head_dim);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < n_head; ++h) {
      const int kvh = h / group;
      for (int t = 0; t < T; ++t) {
        const float* qt = qi + ((int64_t(b) * T + t) * n_head + h) * head_dim;
        // Causal: row t sees keys j0..t only (j0 0, or its document's start).
        const int j0 = first(b, t);
        double m = -std::numeric_limits<double>::infinity();
        for (int j = j0; j <= t; ++j) {
          const float* kj = ki + ((int64_t(b) * T + j) * n_kv_head + kvh) * head_dim;
          s[j] = scale * dot(qt, kj, head_dim);
          m = std::max(m, s[j]);
        }
        double sum = 0.0;
        for (int j = j0; j <= t; ++j) {
          s[j] = std::exp(s[j] - m);
          sum += s[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = j0; j <= t; ++j) {
          const double p = s[j] / sum;
          const float* vj = vi + (int64_t(b) * T + j) * v_ld + int64_t(kvh) * head_dim;
          for (int d = 0; d < head_dim; ++d) acc[d] += p * vj[d];
        }
        float* ot = o + ((int64_t(b) * T + t) * n_head + h) * head_dim;
        for (int d = 0; d < head_dim; ++d) ot[d] = float(acc[d]);
        l[(int64_t(b) * n_head + h) * T + t] = float(m + std::log(sum));
      }
    }
}

void CpuOps::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                                   Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                                   int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                                   const Documents& docs) {
  const KeyStart first{docs.empty() ? nullptr : docs.start.i32(), T};
  const int64_t nkv = int64_t(B) * T * n_kv_head * head_dim;
  const int64_t kv_width = int64_t(n_kv_head) * head_dim;
  float* dqo = dq.f32();
  float* dko = dk.f32();
  float* dvo = dv.f32();
  const float* doi = dout.f32();
  const float* oi = out.f32();
  const float* l = lse.f32();
  const float* qi = q.f32();
  const float* ki = k.f32();
  const float* vi = v.f32();
  const int group = n_head / n_kv_head;
  const double scale = 1.0 / std::sqrt(double(head_dim));
  // dk and dv sum over every query row and every query head of the group;
  // summing in double keeps that long reduction from costing precision.
  std::vector<double> dk_acc(nkv, 0.0), dv_acc(nkv, 0.0), dq_acc(head_dim);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < n_head; ++h) {
      const int kvh = h / group;
      for (int i = 0; i < T; ++i) {
        const int64_t qoff = ((int64_t(b) * T + i) * n_head + h) * head_dim;
        const float* qr = qi + qoff;
        const float* dor = doi + qoff;
        const double lse_i = l[(int64_t(b) * n_head + h) * T + i];
        // With P = softmax(S) and dP = dout V^T, dS = P (dP - D) where
        // D_i = sum_j P_ij dP_ij = dout_i . out_i.
        const double D = dot(dor, oi + qoff, head_dim);
        std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
        for (int j = first(b, i); j <= i; ++j) {
          const int64_t kvoff = ((int64_t(b) * T + j) * n_kv_head + kvh) * head_dim;
          const float* kj = ki + kvoff;
          const float* vj = vi + (int64_t(b) * T + j) * v_ld + int64_t(kvh) * head_dim;
          // Probabilities are recomputed from q, k and the saved lse instead of
          // stored, as flash attention does.
          const double p = std::exp(scale * dot(qr, kj, head_dim) - lse_i);
          const double ds = p * (dot(dor, vj, head_dim) - D);
          for (int d = 0; d < head_dim; ++d) {
            dq_acc[d] += ds * kj[d];
            dk_acc[kvoff + d] += ds * qr[d];
            dv_acc[kvoff + d] += p * dor[d];
          }
        }
        for (int d = 0; d < head_dim; ++d) dqo[qoff + d] = float(scale * dq_acc[d]);
      }
    }
  for (int64_t i = 0; i < nkv; ++i) {
    dko[i] = float(scale * dk_acc[i]);
    dvo[i / kv_width * v_ld + i % kv_width] = float(dv_acc[i]);
  }
}

void CpuOps::do_swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                       Tensor amax) {
  const int64_t n = int64_t(rows) * cols;
  float* so = s.f32();
  const float* ai = a.f32();
  const float* bi = b.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * ab_ld + c;
      so[r * cols + c] = float(ai[i] * sigmoid(ai[i]) * bi[i]);
    }
  if (amax.numel > 0) CpuOps::do_amax(amax.slice(0, 1), s.slice(0, n));
}

void CpuOps::do_swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows,
                                int cols, int64_t ab_ld, Tensor amax) {
  float* dao = da.f32();
  float* dbo = db.f32();
  const float* dsi = ds.f32();
  const float* ai = a.f32();
  const float* bi = b.f32();
  float m = 0.0f;  // max |da|, |db| as stored
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      // Read everything first so da and db may alias a and b.
      const int64_t i = r * ab_ld + c;
      const double x = ai[i], y = bi[i], d = dsi[r * cols + c];
      const double sg = sigmoid(x);
      // silu'(x) = sg + x sg (1 - sg)
      dao[i] = float(d * y * sg * (1.0 + x * (1.0 - sg)));
      dbo[i] = float(d * x * sg);
      // As Ops::amax: NaN does not count (fmax keeps the number).
      m = std::fmax(m, std::fmax(std::fabs(dao[i]), std::fabs(dbo[i])));
    }
  if (amax.numel > 0) amax.f32()[0] = m;
}

void CpuOps::do_relu2(Tensor s, Tensor a, int64_t n, Tensor amax) {
  float* so = s.f32();
  const float* ai = a.f32();
  for (int64_t i = 0; i < n; ++i) {
    const double r = ai[i] > 0 ? ai[i] : 0.0;
    so[i] = float(r * r);
  }
  if (amax.numel > 0) CpuOps::do_amax(amax.slice(0, 1), s.slice(0, n));
}

void CpuOps::do_relu2_backward(Tensor da, Tensor ds, Tensor a, int64_t n, Tensor amax) {
  float* dao = da.f32();
  const float* dsi = ds.f32();
  const float* ai = a.f32();
  float m = 0.0f;  // max |da| as stored
  for (int64_t i = 0; i < n; ++i) {
    // Read both first so da may alias a or ds. d relu(a)^2 / da = 2 relu(a).
    const double r = ai[i] > 0 ? ai[i] : 0.0, d = dsi[i];
    dao[i] = float(2.0 * r * d);
    m = std::fmax(m, std::fabs(dao[i]));  // as Ops::amax: NaN does not count
  }
  if (amax.numel > 0) amax.f32()[0] = m;
}

void CpuOps::do_add(Tensor y, Tensor a, Tensor b, int64_t n) {
  float* yo = y.f32();
  const float* ai = a.f32();
  const float* bi = b.f32();
  for (int64_t i = 0; i < n; ++i) yo[i] = ai[i] + bi[i];
}

void CpuOps::do_cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                              float grad_scale, HeadLoss extra) {
  float* lo = losses.f32();
  float* x = logits.f32();
  const int32_t* tg = targets.i32();
  const double cap = extra.softcap, zl = extra.z_loss;
  std::vector<double> y(
      static_cast<size_t>(V));  // one row's softmax inputs: the logits, capped where asked
  for (int i = 0; i < n; ++i) {
    float* row = x + int64_t(i) * Vp;
    const int t = tg[i];
    FSDP_CHECK(t < V, "target ", t, " outside vocab ", V);
    if (grad_scale != 0.0f) std::fill(row + V, row + Vp, 0.0f);  // padding: no gradient
    if (t < 0) {
      lo[i] = 0.0f;
      if (grad_scale != 0.0f) std::fill(row, row + V, 0.0f);
      continue;
    }
    for (int j = 0; j < V; ++j) y[j] = cap > 0 ? cap * std::tanh(row[j] / cap) : double(row[j]);
    // Subtracting the row max keeps exp() from overflowing on large logits.
    double m = y[0];
    for (int j = 1; j < V; ++j) m = std::max(m, y[j]);
    // exp() dominates for large vocabularies, so it is taken once per logit:
    // when a gradient is wanted the exponentials are parked in the row, which
    // is about to be overwritten anyway.
    const bool grad = grad_scale != 0.0f;
    double sum = 0.0;
    for (int j = 0; j < V; ++j) {
      const double e = std::exp(y[j] - m);
      sum += e;
      if (grad) row[j] = float(e);
    }
    const double lse = m + std::log(sum);
    lo[i] = float(lse - y[t] + zl * lse * lse);
    if (grad) {
      // d/dy_j of lse - y_t + zl lse^2 = (1 + 2 zl lse) p_j - [j = t].
      const double scale = grad_scale * (1 + 2 * zl * lse) / sum;
      for (int j = 0; j < V; ++j) row[j] = float(scale * row[j]);
      row[t] = float(row[t] - double(grad_scale));
      // Through the cap: dy/dz = 1 - tanh^2(z / cap) = 1 - (y / cap)^2.
      if (cap > 0)
        for (int j = 0; j < V; ++j) row[j] = float(row[j] * (1 - (y[j] / cap) * (y[j] / cap)));
    }
  }
}

// ---- optimizer and engine ---------------------------------------------------

void CpuOps::do_cast(Tensor dst, Tensor src) {
  const int64_t n = dst.numel;
  if (dst.dtype == src.dtype) {
    CpuOps::do_copy(dst, src);
  } else if (dst.dtype == DType::bf16) {
    const float* s = src.f32();
    auto* d = static_cast<uint16_t*>(dst.data);
    for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(s[i]);
  } else {
    const auto* s = static_cast<const uint16_t*>(src.data);
    float* d = dst.f32();
    for (int64_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
  }
}

void CpuOps::do_accumulate(Tensor dst, Tensor src, float scale) {
  float* d = dst.f32();
  const int64_t n = dst.numel;
  if (src.dtype == DType::bf16) {
    const auto* s = static_cast<const uint16_t*>(src.data);
    for (int64_t i = 0; i < n; ++i) d[i] += scale * bf16_to_f32(s[i]);
  } else {
    const float* s = src.f32();
    for (int64_t i = 0; i < n; ++i) d[i] += scale * s[i];
  }
}

double CpuOps::do_sum_squares(Tensor x) {
  const float* p = x.f32();
  double s = 0.0;
  for (int64_t i = 0; i < x.numel; ++i) s += double(p[i]) * p[i];
  return s;
}

void CpuOps::do_adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                      const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) {
  const int64_t n = param.numel;
  float* p = param.f32();
  float* g = grad.f32();
  float* m = exp_avg.f32();
  float* v = exp_avg_sq.f32();
  const double b1 = h.beta1, b2 = h.beta2, lr = h.lr;
  const double bc1 = 1.0 - std::pow(b1, h.step);
  const double sqrt_bc2 = std::sqrt(1.0 - std::pow(b2, h.step));
  for (const AdamWSpan& sp : spans) {
    // Same order as torch.optim.AdamW: decay the weight first (decoupled from
    // the gradient), then the bias-corrected Adam step with eps outside the sqrt.
    const double decay = 1.0 - lr * sp.weight_decay;
    for (int64_t i = sp.begin; i < sp.begin + sp.count; ++i) {
      const double gi = double(g[i]) * h.grad_scale;
      const double mi = b1 * m[i] + (1.0 - b1) * gi;
      const double vi = b2 * v[i] + (1.0 - b2) * gi * gi;
      m[i] = float(mi);
      v[i] = float(vi);
      const double pi = double(p[i]) * decay;
      p[i] = float(pi - lr * (mi / bc1) / (std::sqrt(vi) / sqrt_bc2 + h.eps));
    }
  }
  if (send.numel > 0 && send.data != param.data) CpuOps::do_cast(send.slice(0, n), param);
  if (clear_grad) std::fill(g, g + n, 0.0f);
}

}  // namespace fsdp
