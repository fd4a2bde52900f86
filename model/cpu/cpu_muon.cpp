// The CPU reference of the Muon optimizer's ops (model/ops.h): fp32 with
// OpenBLAS GEMMs, in the order torch.optim.Muon computes (torch/optim/_muon.py),
// so that an fp32 PyTorch run of it is an independent check.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/cpu/cpu_ops.h"

namespace fsdp {

namespace {
// torch.lerp's formula: start + w (end - start), from the nearer end.
float lerp(float start, float end, float w) {
  return w < 0.5f ? start + w * (end - start) : end - (end - start) * (1.0f - w);
}
}  // namespace

void CpuOps::do_muon_momentum(Tensor grad, Tensor buf, const std::vector<MuonSpan>& spans,
                              float momentum, bool nesterov, float grad_scale) {
  float* g = grad.f32();
  float* b = buf.f32();
  for (const MuonSpan& sp : spans)
    for (int64_t i = sp.begin; i < sp.begin + sp.count; ++i) {
      const float gi = g[i] * grad_scale;
      b[i] = lerp(b[i], gi, 1.0f - momentum);
      g[i] = nesterov ? lerp(gi, b[i], momentum) : b[i];
    }
}

namespace {
void newton_schulz_one(Tensor out, Tensor x, int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  // Work on the wide orientation X[m, n], m <= n, so the Gram matrix is m x m.
  const bool tall = rows > cols;
  const int m = int(tall ? cols : rows), n = int(tall ? rows : cols);
  const float* in = x.f32();
  std::vector<float> X(size_t(m) * n), Y(size_t(m) * n), A(size_t(m) * m), B(size_t(m) * m);
  double sq = 0;
  for (int64_t i = 0; i < rows * cols; ++i) sq += double(in[i]) * in[i];
  const float norm = std::max(float(std::sqrt(sq)) * ns.norm_scale, ns.eps);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float v = in[r * cols + c] / norm;
      if (tall)
        X[size_t(c) * n + r] = v;
      else
        X[size_t(r) * n + c] = v;
    }
  for (int s = 0; s < ns.steps; ++s) {
    // A = X X^T; B = b A + c A A (A is symmetric); X = a X + B X
    const NsQuintic& q = ns.quintic(s);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, n, 1.0f, X.data(), n, X.data(), n,
                0.0f, A.data(), m);
    B = A;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, q.c, A.data(), m, A.data(), m,
                q.b, B.data(), m);
    Y = X;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f, B.data(), m, X.data(), n,
                q.a, Y.data(), n);
    std::swap(X, Y);
  }
  float* o = out.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      o[r * cols + c] = tall ? X[size_t(c) * n + r] : X[size_t(r) * n + c];
}
}  // namespace

void CpuOps::do_newton_schulz(const std::vector<Tensor>& outs, const std::vector<Tensor>& xs,
                              int64_t rows, int64_t cols, const NewtonSchulz& ns) {
  for (size_t i = 0; i < xs.size(); ++i) newton_schulz_one(outs[i], xs[i], rows, cols, ns);
}

void CpuOps::do_muon_update(Tensor param, Tensor update, const std::vector<MuonSpan>& spans,
                            float lr, float weight_decay) {
  float* p = param.f32();
  const float* u = update.f32();
  const float decay = 1.0f - lr * weight_decay;
  for (const MuonSpan& sp : spans) {
    const float step = lr * sp.lr_scale;
    for (int64_t i = sp.begin; i < sp.begin + sp.count; ++i) p[i] = p[i] * decay - step * u[i];
  }
}

void CpuOps::do_row_mean_squares(Tensor out, Tensor x, int64_t rows, int64_t cols) {
  const float* in = x.f32();
  float* o = out.f32();
  for (int64_t r = 0; r < rows; ++r) {
    double sq = 0;
    for (int64_t c = 0; c < cols; ++c) sq += double(in[r * cols + c]) * in[r * cols + c];
    o[r] = float(sq / double(cols));
  }
}

void CpuOps::do_normuon_scale(Tensor x, int64_t first, int64_t count, Tensor stats, int64_t rows,
                              int64_t cols, float beta2, float eps) {
  float* m = stats.f32();
  float* v = m + rows;
  std::vector<float> s(static_cast<size_t>(rows));
  double sum_m = 0, sum_ms2 = 0;
  for (int64_t r = 0; r < rows; ++r) {
    v[r] = lerp(v[r], m[r], 1.0f - beta2);
    s[size_t(r)] = 1.0f / (std::sqrt(v[r]) + eps);
    sum_m += m[r];
    sum_ms2 += double(m[r]) * s[size_t(r)] * s[size_t(r)];
  }
  // sum m s^2 is 0 only when the update is: leave it 0 (a NaN stays NaN).
  const float keep = sum_ms2 == 0 ? 0.0f : float(std::sqrt(sum_m / sum_ms2));
  for (int64_t r = 0; r < rows; ++r) m[r] = s[size_t(r)] * keep;
  float* p = x.f32();
  for (int64_t i = 0; i < count; ++i) p[i] *= m[(first + i) / cols];
}

}  // namespace fsdp
