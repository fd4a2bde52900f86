// RoPE's rotation frequencies, in one place for the CPU reference and the
// CUDA tables: pair i of a head_dim-wide vector turns by t * inv_freq(i) at
// position t, with inv_freq(i) = theta^(-2i / head_dim), optionally rescaled
// as Llama 3.1 and 3.2 do (`rope_type: "llama3"` in their config.json): slow
// frequencies, whose wavelength exceeds original_context / low_freq_factor,
// are divided by `factor`; fast ones, under original_context /
// high_freq_factor, are kept; those between are blended linearly in
// original_context / wavelength. That stretches the context a model was
// pretrained at (8192) to the one it was extended to without moving the
// short-range frequencies.
#pragma once

#include <cmath>

namespace fsdp {

struct RopeScaling {
  float factor = 0;  // 0: no scaling
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  int original_context = 8192;

  bool enabled() const { return factor > 0; }
  bool operator==(const RopeScaling&) const = default;
};

struct Rope {
  float theta = 10000.0f;
  RopeScaling scaling;

  Rope() = default;
  // A plain RoPE is its base: ops and tests may pass theta alone.
  Rope(float base) : theta(base) {}  // NOLINT(google-explicit-constructor)
  Rope(float base, const RopeScaling& s) : theta(base), scaling(s) {}
  bool operator==(const Rope&) const = default;
};

// The frequency of pair i (0 <= i < head_dim / 2), in double.
inline double rope_inv_freq(const Rope& r, int i, int head_dim) {
  const double f = std::pow(double(r.theta), -2.0 * i / head_dim);
  const RopeScaling& s = r.scaling;
  if (!s.enabled()) return f;
  const double kPi = 3.14159265358979323846;
  const double wavelen = 2 * kPi / f, ctx = s.original_context;
  if (wavelen > ctx / s.low_freq_factor) return f / s.factor;
  if (wavelen < ctx / s.high_freq_factor) return f;
  const double smooth =
      (ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1 - smooth) * f / s.factor + smooth * f;
}

}  // namespace fsdp
