// Host-side helpers shared by the CUDA parity tests and the op benchmark (no
// GoogleTest here, so bench/cuda can use them): move host vectors to and from
// either backend, round to bf16 so both backends see identical inputs, and
// measure relative L2 error with NaN never passing.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "model/cpu/cpu_ops.h"  // f32_to_bf16 / bf16_to_f32 (inline, no link dependency)
#include "model/ops.h"

namespace fsdp::test {

inline float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

// Uniform in [lo, hi), never exactly zero, rounded to bf16 so the fp32 CPU
// reference and the bf16 GPU backend start from the same numbers.
inline std::vector<float> random_bf16(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                      float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    do x = round_bf16(u(rng));
    while (x == 0.0f);
  }
  return v;
}

// Host <-> backend transfers of f32 vectors, converting to the tensor's dtype.
// u8 (FP8 codes) travels as the code's value; NaN uploads as 0xff, which
// quantize_fp8 never writes (its NaN is 0x7f), and 0xff downloads as NaN, so
// a poisoned byte an op forgot to write still shows.
inline void upload(Ops& ops, Tensor t, const std::vector<float>& h) {
  FSDP_CHECK(int64_t(h.size()) == t.numel);
  if (t.dtype == DType::u8) {
    std::vector<uint8_t> b(h.size());
    for (size_t i = 0; i < h.size(); ++i) b[i] = std::isnan(h[i]) ? 0xff : uint8_t(h[i]);
    ops.to_device(t, b.data());
  } else if (t.dtype == DType::bf16) {
    std::vector<uint16_t> b(h.size());
    for (size_t i = 0; i < h.size(); ++i) b[i] = f32_to_bf16(h[i]);
    ops.to_device(t, b.data());
  } else {
    ops.to_device(t, h.data());
  }
}
inline std::vector<float> download(Ops& ops, Tensor t) {
  std::vector<float> h(size_t(t.numel));
  if (t.dtype == DType::u8) {
    std::vector<uint8_t> b(h.size());
    ops.to_host(b.data(), t);
    for (size_t i = 0; i < h.size(); ++i) h[i] = b[i] == 0xff ? NAN : float(b[i]);
  } else if (t.dtype == DType::bf16) {
    std::vector<uint16_t> b(h.size());
    ops.to_host(b.data(), t);
    for (size_t i = 0; i < h.size(); ++i) h[i] = bf16_to_f32(b[i]);
  } else {
    ops.to_host(h.data(), t);
  }
  return h;
}
// NaN in every element, so an element an op forgets to write fails the check.
inline void poison(Ops& ops, Tensor t) {
  upload(ops, t, std::vector<float>(size_t(t.numel), std::numeric_limits<float>::quiet_NaN()));
}

// ||got - want|| / ||want||; infinite if any element of got is not finite.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * want[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Owns tensors of one backend for a test's (or a benchmark case's) lifetime.
class Pool {
 public:
  explicit Pool(Ops& ops) : ops_(ops) {}
  ~Pool() {
    for (Tensor t : owned_) ops_.free(t);
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  Tensor make(DType d, int64_t n) {
    owned_.push_back(ops_.alloc(d, n));
    return owned_.back();
  }
  Tensor make(DType d, const std::vector<float>& h) {
    Tensor t = make(d, int64_t(h.size()));
    upload(ops_, t, h);
    return t;
  }
  Tensor tokens(const std::vector<int32_t>& h) {
    Tensor t = make(DType::i32, int64_t(h.size()));
    ops_.to_device(t, h.data());
    return t;
  }

 private:
  Ops& ops_;
  std::vector<Tensor> owned_;
};

}  // namespace fsdp::test
