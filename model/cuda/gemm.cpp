#include "model/cuda/gemm.h"

#include <algorithm>
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

// The alignment every matrix of a strided batch keeps: the first one's, and
// that of the stride in bytes (bf16 elements).
uint32_t alignment_of(const void* p, int64_t stride, int batch) {
  const uint32_t al = alignment_of(p);
  if (batch < 2) return al;
  return std::min(al, alignment_of(reinterpret_cast<const void*>(uintptr_t(stride) * 2)));
}

struct Key {
  bool ta, tb, d_f32, accumulate;
  int m, n, k, lda, ldb, ldd;
  uint32_t align_a, align_b, align_c, align_d;
  int a_fp8 = 0, b_fp8 = 0;  // 0: bf16 operand; 1: e4m3, 2: e5m2 (matmul_fp8)
  int batch = 1;             // matmul_batched: products, and their strides in elements
  int64_t stride_a = 0, stride_b = 0, stride_d = 0;
  auto tie() const {
    return std::tie(ta, tb, d_f32, accumulate, m, n, k, lda, ldb, ldd, align_a, align_b, align_c,
                    align_d, a_fp8, b_fp8, batch, stride_a, stride_b, stride_d);
  }
  bool operator<(const Key& o) const { return tie() < o.tie(); }
};

// The heuristic's candidates, best first. An algorithm the heuristic offers
// can still be refused at launch (workspace, alignment corner cases); the
// next one is tried and the one that ran is kept.
constexpr int kCandidates = 16;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;
  size_t chosen = 0;
  bool timed = false;
};

std::string describe(const Key& k) {
  std::ostringstream os;
  const char* fp8[] = {"", " e4m3", " e5m2"};
  os << "gemm" << (k.a_fp8 ? fp8[k.a_fp8] : "") << (k.b_fp8 ? std::string(" x") + fp8[k.b_fp8] : "")
     << " m=" << k.m << " n=" << k.n << " k=" << k.k << (k.ta ? " A^T" : "") << (k.tb ? " B^T" : "")
     << (k.d_f32 ? " f32 out" : " bf16 out")
     << (k.batch > 1 ? ", batch of " + std::to_string(k.batch) : std::string()) << ", alignments "
     << k.align_a << "/" << k.align_b << "/" << k.align_c << "/" << k.align_d << " bytes";
  return os.str();
}

}  // namespace

struct Gemm::Impl {
  cublasLtHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  bool time_candidates = true;
  std::map<Key, Plan> plans;
  std::vector<std::string> choices;

  Plan& plan(const Key& key);
  cublasStatus_t launch(const Plan& p, size_t algo, float alpha, const void* A, const void* B,
                        float beta, const void* C, void* D) {
    return cublasLtMatmul(handle, p.op, &alpha, A, p.a, B, p.b, &beta, C, p.d, D, p.d,
                          &p.algos[algo], workspace, workspace_bytes, stream);
  }
  void time(Plan& p, const Key& key, float alpha, const void* A, const void* B, float beta,
            const void* C, void* D);
  void run(const Key& key, float alpha, const void* A, const void* B, float beta, const void* C,
           void* D, const float* a_scale, const float* b_scale);
};

Gemm::Gemm(size_t workspace_bytes, cudaStream_t stream, bool time_candidates)
    : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->time_candidates = time_candidates;
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
  auto type = [](int fp8) {
    return fp8 == 0 ? CUDA_R_16BF : fp8 == 1 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
  };
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, type(key.a_fp8), key.ta ? key.k : key.m,
                                               key.ta ? key.m : key.k, key.lda));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, type(key.b_fp8), key.tb ? key.n : key.k,
                                               key.tb ? key.k : key.n, key.ldb));
  FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, key.d_f32 ? CUDA_R_32F : CUDA_R_16BF, key.m,
                                               key.n, key.ldd));
  if (key.batch > 1) {
    const std::pair<cublasLtMatrixLayout_t, int64_t> strided[] = {
        {p.a, key.stride_a}, {p.b, key.stride_b}, {p.d, key.stride_d}};
    for (const auto& [layout, stride] : strided) {
      FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                         &key.batch, sizeof key.batch));
      FSDP_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
          layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride));
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes;
  FSDP_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> aligns[] = {
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b},
      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c},
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
  if (p.algos.empty()) throw_error("cuBLASLt has no algorithm for ", describe(key));
  return plans.emplace(key, p).first->second;
}

// The heuristic ranks its candidates by a model of the GPU; on the GPU
// itself the first is often not the fastest (narrow outputs such as the k
// and v projections' weight gradients most of all). Each candidate runs once
// to warm up, then three times, on the first call's operands; the fastest
// best-of-three wins for the rest of the run. A product that adds into its
// output (beta != 0) is timed into a scratch output, so the caller's is not
// added to four times per candidate.
void Gemm::Impl::time(Plan& p, const Key& key, float alpha, const void* A, const void* B,
                      float beta, const void* C, void* D) {
  p.timed = true;
  if (!time_candidates || p.algos.size() < 2) return;
  void* scratch = nullptr;
  if (beta != 0.0f) {
    const size_t bytes =
        (size_t(key.batch - 1) * size_t(key.stride_d) + size_t(key.ldd) * size_t(key.n)) *
        (key.d_f32 ? 4 : 2);
    FSDP_CUDA_CHECK(cudaMallocAsync(&scratch, bytes, stream));
    if (C == D) C = scratch;  // uninitialised: its values do not change the speed
    D = scratch;
  }
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  FSDP_CUDA_CHECK(cudaEventCreate(&e0));
  FSDP_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<float> ms(p.algos.size(), -1.0f);
  for (size_t i = 0; i < p.algos.size(); ++i) {
    if (launch(p, i, alpha, A, B, beta, C, D) != CUBLAS_STATUS_SUCCESS) continue;  // refused
    for (int rep = 0; rep < 3; ++rep) {
      FSDP_CUDA_CHECK(cudaEventRecord(e0, stream));
      FSDP_CUBLAS_CHECK(launch(p, i, alpha, A, B, beta, C, D), describe(key));
      FSDP_CUDA_CHECK(cudaEventRecord(e1, stream));
      FSDP_CUDA_CHECK(cudaEventSynchronize(e1));
      float t = 0;
      FSDP_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (ms[i] < 0 || t < ms[i]) ms[i] = t;
    }
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  if (scratch) FSDP_CUDA_CHECK(cudaFreeAsync(scratch, stream));
  for (size_t i = 0; i < ms.size(); ++i)
    if (ms[i] >= 0 && (ms[p.chosen] < 0 || ms[i] < ms[p.chosen])) p.chosen = i;
  std::ostringstream os;
  os << "cuBLASLt " << describe(key) << (key.accumulate ? ", beta 1" : "") << ": candidate "
     << p.chosen + 1 << " of " << ms.size() << "; ms:";
  for (float t : ms) os << " " << (t >= 0 ? std::to_string(t).substr(0, 6) : "refused");
  choices.push_back(os.str());
}

std::vector<std::string> Gemm::choices() const {
  return impl_->choices;
}

// The plan for key (timed on its first call), then the launch. An FP8
// product's inverse scales are pointers in the cached descriptor, set for
// each call: they name this call's tensors.
void Gemm::Impl::run(const Key& key, float alpha, const void* A, const void* B, float beta,
                     const void* C, void* D, const float* a_scale, const float* b_scale) {
  Plan& p = plan(key);
  if (key.a_fp8) {
    FSDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                     &a_scale, sizeof a_scale));
    FSDP_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                     &b_scale, sizeof b_scale));
  }
  if (!p.timed) time(p, key, alpha, A, B, beta, C, D);
  for (;;) {
    const cublasStatus_t st = launch(p, p.chosen, alpha, A, B, beta, C, D);
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

void Gemm::matmul_fp8(int m, int n, int k, const void* A, int lda, int a_fp8, const float* a_scale,
                      const void* B, int ldb, int b_fp8, const float* b_scale, void* D, bool d_f32,
                      int ldd, float beta, const void* C) {
  if (!C) C = D;
  FSDP_CHECK(a_fp8 >= 1 && a_fp8 <= 2 && b_fp8 >= 1 && b_fp8 <= 2 && !(a_fp8 == 2 && b_fp8 == 2),
             "FP8 GEMM operand formats ", a_fp8, " x ", b_fp8, " (e5m2 x e5m2 has no kernel)");
  if (m == 0 || n == 0) return;
  FSDP_CHECK(k > 0 && k % 16 == 0 && lda % 16 == 0 && ldb % 16 == 0 && ldd % 8 == 0,
             "FP8 GEMM m=", m, " n=", n, " k=", k,
             ": k and the leading dimensions must be "
             "multiples of 16");
  // Found on the H100: a scale 4 bytes into a buffer makes every algorithm
  // refuse the launch ("not supported"), far from the cause (kFp8ScaleSlot).
  FSDP_CHECK(alignment_of(a_scale) >= 16 && alignment_of(b_scale) >= 16, "FP8 GEMM m=", m, " n=", n,
             " k=", k, ": scale pointers ", a_scale, " and ", b_scale,
             " must be 16-byte aligned (one kFp8ScaleSlot each)");
  Key key{true,
          false,
          d_f32,
          beta != 0.0f,
          m,
          n,
          k,
          lda,
          ldb,
          ldd,
          alignment_of(A),
          alignment_of(B),
          alignment_of(C),
          alignment_of(D)};
  key.a_fp8 = a_fp8;
  key.b_fp8 = b_fp8;
  impl_->run(key, 1.0f, A, B, beta, C, D, a_scale, b_scale);
}

void Gemm::matmul(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                  const void* B, int ldb, void* D, bool d_f32, int ldd, float beta, const void* C) {
  if (m == 0 || n == 0) return;
  if (!C) C = D;
  if (k == 0) {  // an empty sum: D = beta * C, which for beta 0 or 1 is a clear or a copy
    FSDP_CHECK(beta == 0.0f || beta == 1.0f, "gemm with k = 0 and beta ", beta);
    const size_t es = d_f32 ? 4 : 2;
    if (beta == 0.0f)
      FSDP_CUDA_CHECK(cudaMemset2DAsync(D, size_t(ldd) * es, 0, size_t(m) * es, n, impl_->stream));
    else if (C != D)
      FSDP_CUDA_CHECK(cudaMemcpy2DAsync(D, size_t(ldd) * es, C, size_t(ldd) * es, size_t(m) * es, n,
                                        cudaMemcpyDeviceToDevice, impl_->stream));
    return;
  }
  const Key key{
      trans_a,         trans_b,         d_f32,           beta != 0.0f,   m, n, k, lda, ldb, ldd,
      alignment_of(A), alignment_of(B), alignment_of(C), alignment_of(D)};
  impl_->run(key, 1.0f, A, B, beta, C, D, nullptr, nullptr);
}

void Gemm::matmul_batched(bool trans_a, bool trans_b, int m, int n, int k, const void* A, int lda,
                          int64_t stride_a, const void* B, int ldb, int64_t stride_b, void* D,
                          int ldd, int64_t stride_d, int batch, float alpha, float beta,
                          const void* C) {
  FSDP_CHECK(m > 0 && n > 0 && k > 0 && batch > 0, "batched gemm m=", m, " n=", n, " k=", k,
             " batch=", batch);
  if (!C) C = D;
  Key key{trans_a,
          trans_b,
          false,
          beta != 0.0f,
          m,
          n,
          k,
          lda,
          ldb,
          ldd,
          alignment_of(A, stride_a, batch),
          alignment_of(B, stride_b, batch),
          alignment_of(C, stride_d, batch),
          alignment_of(D, stride_d, batch)};
  if (batch > 1) {
    key.batch = batch;
    key.stride_a = stride_a;
    key.stride_b = stride_b;
    key.stride_d = stride_d;
  }
  impl_->run(key, alpha, A, B, beta, C, D, nullptr, nullptr);
}

}  // namespace fsdp::cuda
