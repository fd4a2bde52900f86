// What the op table's builder files (op_cases.cpp and the *_op_cases.cpp) share:
// short dtype names, the RoPE base, a printf-style formatter for shapes, the
// two kinds of check, and the builders that live outside op_cases.cpp (so
// neither file grows past a readable length). Not for other users: op_cases.h
// is the table's interface.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tests/model/cuda/op_cases.h"

namespace fsdp::test {

inline constexpr DType BF = DType::bf16, F32 = DType::f32;
inline constexpr float kTheta = 10000.0f;  // RoPE base

template <typename... A>
std::string fmt(const char* f, A... a) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

// Compare t with the reference's tensor at the same place.
inline Check vs_ref(std::string what, Tensor t, Tol tol) {
  Check c;
  c.what = std::move(what);
  c.t = t;
  c.tol = tol;
  return c;
}
// Compare t with known host values (the reference is not consulted).
inline Check vs_host(std::string what, Tensor t, Tol tol, std::vector<float> want) {
  Check c = vs_ref(std::move(what), t, tol);
  c.want = std::move(want);
  return c;
}

// ---- attention (attention_op_cases.cpp) ---------------------------------------
// Causal GQA attention; v_ld > 0: v and dv are the last columns of rows v_ld
// wide (the q|k|v GEMM's output).
OpCase attention_case(int B, int T, int H, int Hkv, int hd, int64_t v_ld = 0);

// ---- fused ops (fused_op_cases.cpp) -------------------------------------------
// linear_add: y = x W^T + r; alias: r is y itself (y holds the residual on
// entry), as the model's residual stream calls it.
OpCase linear_add_case(int M, int N, int K, bool alias);
// norm_rope: QK-norm and RoPE over [B, T, H, hd], backward with dg of dtype dg.
// ld > 0: x and dx are views from column `col` of rows ld wide (q or k inside
// the q|k|v GEMM's output); the other columns must come back untouched.
OpCase rope_case(int B, int T, int H, int hd, const Rope& rope = kTheta);
OpCase swiglu_case(int rows, int cols, bool halves);
OpCase add_case(int64_t n, bool misaligned);
OpCase norm_rope_case(int B, int T, int H, int hd, DType dg, int64_t ld = 0, int64_t col = 0);
// norm_rope without a gain (a model without QK-norm): x's rows rotated into y.
OpCase rope_rows_case(int B, int T, int H, int hd, int64_t ld = 0, int64_t col = 0);

// ---- FP8 (fp8_op_cases.cpp) ---------------------------------------------------
// quantize_fp8 over n values of dtype src spanning ~2^24 in magnitude (so
// some scale to FP8 subnormals and some to zero), bitwise against the
// reference; "backward" dequantizes the reference's codes. zeros: all zero.
OpCase quantize_fp8_case(int64_t n, Fp8 format, DType src, bool zeros = false);
// quantize_fp8_t: the codes of src [rows, cols] and their transpose.
OpCase quantize_fp8_t_case(int rows, int cols, Fp8 format, DType src);
// The engine's FP8 gather casts on an f32 weight [rows, cols]: its amax, the
// cast by a given (larger, all-reduced) amax, an empty slice's cast (which
// still writes its scale), and transpose_fp8 of the codes; all bitwise.
OpCase fp8_gather_cast_case(int rows, int cols);
OpCase fp8_each_case();
OpCase quantize_fp8_t_amax_case(int rows, int cols, DType src, bool t_only);
// linear_fp8 on codes quantized from random x [M, K] and w [N, K].
OpCase linear_fp8_case(int M, int N, int K, Fp8 x_format, Fp8 w_format, bool residual = false);
// linear_backward_fp8 from transposed codes (x, w e4m3; dy e5m2).
OpCase linear_backward_fp8_case(int M, int N, int K, bool accumulate_dx, DType dw);

// ---- Muon (muon_op_cases.cpp) -------------------------------------------------
// The momentum and update over spans of an f32 shard of n, and Newton-Schulz
// at small shapes; then the same on one block of model c (`block` elements),
// its matrices batched by shape as MuonStep batches them.
void add_muon_cases(std::vector<OpCase>& t, int64_t n);
void add_muon_model_cases(std::vector<OpCase>& t, const ModelConfig& c, int64_t block);

}  // namespace fsdp::test
