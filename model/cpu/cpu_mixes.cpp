// The CPU reference of the ops that mix one stream into another (model/ops.h):
// the value residual's mean of the values, a value embedding's learned mix of
// the values and a table, and a U-net skip's scaled add. Elementwise in
// double, sums in double in index order.
#include "model/cpu/cpu_ops.h"

namespace fsdp {

namespace {
// f(v[r, c], v0[r, c]) over [rows, cols]: v's rows v_ld apart (the v part of
// the q|k|v GEMM's output), v0 packed.
template <typename F>
void over_values(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld, F f) {
  float* vo = v.f32();
  float* v0o = v0.f32();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) f(vo[r * v_ld + c], v0o[r * cols + c]);
}
}  // namespace

void CpuOps::do_value_residual(Tensor v, Tensor v0, int rows, int cols, int64_t v_ld, bool first) {
  over_values(v, v0, rows, cols, v_ld, [&](float& x, float& x0) {
    if (first)
      x0 = x;
    else
      x = float((double(x) + x0) / 2);
  });
}

void CpuOps::do_value_residual_backward(Tensor dv, Tensor dv0, int rows, int cols, int64_t v_ld,
                                        bool first, bool accumulate) {
  over_values(dv, dv0, rows, cols, v_ld, [&](float& g, float& g0) {
    if (first) {
      g += g0;
      return;
    }
    const float half = g / 2;  // exact
    g0 = accumulate ? g0 + half : half;
    g = half;
  });
}

void CpuOps::do_skip_add(Tensor x, Tensor s, Tensor w, int64_t n) {
  float* xo = x.f32();
  const float* si = s.f32();
  const double wv = w.f32()[0];
  for (int64_t i = 0; i < n; ++i) xo[i] = float(xo[i] + wv * si[i]);
}

void CpuOps::do_skip_add_backward(Tensor ds, Tensor dw, Tensor dx, Tensor s, Tensor w, int64_t n) {
  float* dso = ds.f32();
  const float* dxi = dx.f32();
  const float* si = s.f32();
  const double wv = w.f32()[0];
  double dot = 0;
  for (int64_t i = 0; i < n; ++i) {
    dot += double(dxi[i]) * si[i];
    dso[i] = float(wv * dxi[i]);
  }
  dw.f32()[0] += float(dot);
}

void CpuOps::do_value_embed_mix(Tensor v, Tensor v_in, Tensor e, Tensor w, int rows, int cols,
                                int64_t v_ld) {
  float* vo = v.f32();
  float* vi = v_in.f32();
  const float* ei = e.f32();
  const double w0 = w.f32()[0], w1 = w.f32()[1];
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& x = vo[r * v_ld + c];
      vi[r * cols + c] = x;
      x = float(w0 * x + w1 * ei[r * cols + c]);
    }
}

void CpuOps::do_value_embed_mix_backward(Tensor dv, Tensor de, Tensor dw, Tensor v_in, Tensor e,
                                         Tensor w, int rows, int cols, int64_t v_ld,
                                         bool accumulate) {
  float* dvo = dv.f32();
  float* deo = de.f32();
  const float* vi = v_in.f32();
  const float* ei = e.f32();
  const double w0 = w.f32()[0], w1 = w.f32()[1];
  double dot_v = 0, dot_e = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      float& g = dvo[r * v_ld + c];
      const int64_t i = r * cols + c;
      dot_v += double(g) * vi[i];
      dot_e += double(g) * ei[i];
      deo[i] = float((accumulate ? double(deo[i]) : 0.0) + w1 * g);
      g = float(w0 * g);
    }
  dw.f32()[0] += float(dot_v);
  dw.f32()[1] += float(dot_e);
}

}  // namespace fsdp
