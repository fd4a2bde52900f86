// bf16 GEMMs through cuBLASLt with fp32 accumulation. Descriptors, layouts and
// the heuristic's algorithm are built once per (shape, transposes, output
// type, pointer alignment) and cached; one workspace serves every call.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace fsdp::cuda {

class Gemm {
 public:
  // time_candidates: choose each shape's algorithm by timing the heuristic's
  // candidates on its first call (off under --debug: a choice that depends
  // on timing may differ between runs, and --debug promises repeatable bits).
  Gemm(size_t workspace_bytes, cudaStream_t stream, bool time_candidates = true);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // cuBLASLt's native column-major form: D[m, n] = op(A) op(B) + beta * C,
  // with A and B bf16 and D bf16 or f32 (d_f32). op(A) is A^T when trans_a;
  // A is stored [trans_a ? k : m, trans_a ? m : k] with leading dimension lda,
  // B likewise [trans_b ? n : k, ...] with ldb. C has D's layout and type
  // (a residual added in the epilogue); nullptr means D itself, and C may
  // equal D.
  void matmul(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
              const void* B, int ldb, void* D, bool d_f32, int ldd, float beta,
              const void* C = nullptr);

  // `batch` products of one shape at once (cuBLASLt's strided batch): the
  // i-th reads A + i stride_a, B + i stride_b, C + i stride_d and writes
  // D + i stride_d (strides in elements), D = alpha op(A) op(B) + beta C,
  // all bf16. For the small GEMMs of Muon's Newton-Schulz, which one launch
  // each would leave the GPU mostly idle.
  void matmul_batched(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                      int64_t stride_a, const void* B, int ldb, int64_t stride_b, void* D, int ldd,
                      int64_t stride_d, int batch, float alpha, float beta,
                      const void* C = nullptr);

  // D[m, n] = a_scale[0] * b_scale[0] * A^T B + beta * D with A [k, m] and
  // B [k, n] FP8 codes (both K-major: the "TN" form, the only one Hopper's
  // FP8 tensor cores take), a_fp8/b_fp8 1 for e4m3, 2 for e5m2 (not both
  // e5m2); D bf16 or f32; the scales are device pointers (quantize_fp8's
  // scale_inv). k and the leading dimensions must be multiples of 16.
  // C (null: D) is added with beta, in D's type and layout.
  void matmul_fp8(int m, int n, int k, const void* A, int lda, int a_fp8, const float* a_scale,
                  const void* B, int ldb, int b_fp8, const float* b_scale, void* D, bool d_f32,
                  int ldd, float beta, const void* C = nullptr);

  // One line per shape timed so far: the candidate chosen and every time.
  std::vector<std::string> choices() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::cuda
