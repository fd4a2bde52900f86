#include "model/cuda/gemm.h"

#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/cuda_lib_check.h"

namespace fsdp::cuda {
namespace {

// The largest power of two (up to 256) dividing the address. cuBLASLt's
// heuristic assumes 256-byte alignment unless told otherwise, and weights are
// slices of a flat gathered unit that need not be that aligned.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

struct Key {
  bool ta, tb, d_f32, accumulate;
  int m, n, k, lda, ldb, ldd;
  uint32_t align_a, align_b, align_d;
  auto tie() const {
    return std::tie(ta, tb, d_f32, accumulate, m, n, k, lda, ldb, ldd, align_a, align_b, align_d);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// The heuristic's candidates, best first. An algorithm the heuristic offers
// can still be refused at launch (workspace, alignment corner cases); the
// next one is tried and the one that ran is kept.
constexpr int kCandidates = 8;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;
  size_t chosen = 0;
};

std::string describe(const Key& k) {
  std::ostringstream os;
  os << "gemm m=" << k.m << " n=" << k.n << " k=" << k.k << (k.ta ? " A^T" : "")
     << (k.tb ? " B^T" : "") << (k.d_f32 ? " f32 out" : " bf16 out") << ", alignments " << k.align_a
     << "/" << k.align_b << "/" << k.align_d << " bytes";
  return os.str();
}

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::map<Key, Plan> plans;

  Plan& plan(const Key& key);
};

Gemm::Gemm(size_t workspace_bytes, cudaStream_t stream) : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->workspace_bytes = workspace_bytes;
  FSDP_CUBLAS_CHECK(cublasLtCreate(&impl_->handle));
  FSDP_CUDA_CHECK(cudaMalloc(&impl_->workspace, workspace_bytes));
}

Gemm::~Gemm() {
  for (auto& [key, p] : impl_->plans) {
    cublasLtMatrixLayoutDestroy(p.a);
    cublasLtMatrixLayoutDestroy(p.b);
    cublasLtMatrixLayoutDestroy(p.d);
    cublasLtMatmulDescDestroy(p.op);
  }
  // Destructors must not throw; a failure here only leaks.
  cudaFree(impl_->workspace);
  cublasLtDestroy(impl_->handle);
}

Plan& Gemm::Impl::plan(const Key& key) {
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  Plan p;
  FSDP_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = key.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = key.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  FSDP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  FSDP_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  // Layouts describe the stored matrices, before op().
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, key.ta ? key.k : key.m,
                                               key.ta ? key.m : key.k, key.lda));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, key.tb ? key.n : key.k,
                                               key.tb ? key.k : key.n, key.ldb));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, key.d_f32 ? CUDA_R_32F : CUDA_R_16BF, key.m,
                                               key.n, key.ldd));

  cublasLtMatmulPreference_t pref = nullptr;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d}};
  for (const auto& [attr, v] : aligns)
    FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof v));
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.d, p.d, pref,
                                                           kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  FSDP_CUBLAS_CHECK(st, describe(key));
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS) p.algos.push_back(results[i].algo);
  if (p.algos.empty()) throw_error("cuBLASLt has no bf16 algorithm for ", describe(key));
  return plans.emplace(key, p).first->second;
}

void Gemm::matmul(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                  const void* B, int ldb, void* D, bool d_f32, int ldd, float beta) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // an empty sum: D = beta * D, which for beta 0 or 1 is a clear or nothing
    if (beta == 0.0f)
      FSDP_CUDA_CHECK(cudaMemset2DAsync(D, size_t(ldd) * (d_f32 ? 4 : 2), 0,
                                        size_t(m) * (d_f32 ? 4 : 2), n, impl_->stream));
    return;
  }
  const Key key{trans_a, trans_b,         d_f32,           beta != 0.0f,   m, n, k, lda, ldb,
                ldd,     alignment_of(A), alignment_of(B), alignment_of(D)};
  Plan& p = impl_->plan(key);
  const float alpha = 1.0f;
  for (;;) {
    const cublasStatus_t st =
        cublasLtMatmul(impl_->handle, p.op, &alpha, A, p.a, B, p.b, &beta, D, p.d, D, p.d,
                       &p.algos[p.chosen], impl_->workspace, impl_->workspace_bytes, impl_->stream);
    // Refusals are reported before anything is enqueued, so retrying is safe.
    const bool refused = st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE;
    if (!refused || p.chosen + 1 == p.algos.size()) {
      FSDP_CUBLAS_CHECK(st, describe(key) + ", candidate " + std::to_string(p.chosen + 1) + " of " +
                                std::to_string(p.algos.size()));
      return;
    }
    ++p.chosen;
  }
}

}  // namespace fsdp::cuda
