// A plain sgemm for the standalone GPU build, where no BLAS may be installed.
// Row-major only (all the CPU reference uses); each output element is one
// dot product accumulated in double, so it is at least as accurate as BLAS.
#include <cblas.h>

#include <cstdlib>

extern "C" void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N,
                            int K, float alpha, const float* A, int lda, const float* B, int ldb,
                            float beta, float* C, int ldc) {
  if (order != CblasRowMajor) std::abort();
  const bool at = ta != CblasNoTrans, bt = tb != CblasNoTrans;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double s = 0.0;
      for (int k = 0; k < K; ++k) {
        const float a = at ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        const float b = bt ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        s += double(a) * b;
      }
      float* c = &C[size_t(i) * ldc + j];
      *c = float(alpha * s + (beta == 0.0f ? 0.0 : double(beta) * *c));
    }
}
