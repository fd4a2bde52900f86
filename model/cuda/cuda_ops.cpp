#include "model/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/cuda_driver.h"
#include "common/error.h"
#include "model/cuda/cuda_ops_impl.h"

namespace fsdp {

using namespace cuda_args;

int cuda_device_count() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) return n;
  cudaGetLastError();  // clear the sticky "no driver" error
  // A driver too old for this build is not "no GPU": say what to do.
  int driver = 0, runtime = 0;
  if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
      cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    const std::string why = driver_too_old_message(driver, runtime);
    if (!why.empty()) throw_error(why);
  }
  return 0;
}

OpsCapabilities CudaOps::capabilities() const {
  return {.host_memory = false,
          .native_fp8 = true,
          .muon = true,
          .peak_flops = 989e12,
          .bitwise_reruns = impl_->opt.deterministic};
}

CudaOps::CudaOps(const CudaOpsOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.opt = options;
  if (options.device >= 0) FSDP_CUDA_CHECK(cudaSetDevice(options.device));
  FSDP_CUDA_CHECK(cudaGetDevice(&m.device));
  FSDP_CUDA_CHECK(
      cudaDeviceGetAttribute(&m.dev.sm_count, cudaDevAttrMultiProcessorCount, m.device));
  FSDP_CUDA_CHECK(cudaStreamCreateWithFlags(&m.stream, cudaStreamNonBlocking));
  // Keep freed blocks in the pool: activations are freed and reallocated
  // every step, and returning them to the driver would synchronise.
  cudaMemPool_t pool;
  FSDP_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, m.device));
  uint64_t keep = std::numeric_limits<uint64_t>::max();
  FSDP_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  FSDP_CUDA_CHECK(cudaMalloc(&m.err, sizeof(int) + sizeof(double) * 2));
  m.ss = reinterpret_cast<double*>(reinterpret_cast<char*>(m.err) + sizeof(double));
  FSDP_CUDA_CHECK(cudaMemsetAsync(m.err, 0, sizeof(int), m.stream));
  FSDP_CUDA_CHECK(cudaMallocHost(&m.host_words, 2 * sizeof(double)));
  m.gemm = std::make_unique<cuda::Gemm>(options.gemm_workspace_bytes, m.stream,
                                        /*time_candidates=*/!options.deterministic);
  m.attention = std::make_unique<cuda::Attention>(m.stream, options.deterministic,
                                                  options.allow_slow_attention);
}

int CudaOps::do_mark() {
  Impl& m = *impl_;
  if (m.marks_used == m.marks.size()) {
    cudaEvent_t e = nullptr;
    FSDP_CUDA_CHECK(cudaEventCreate(&e), "timing event");
    m.marks.push_back(e);
  }
  FSDP_CUDA_CHECK(cudaEventRecord(m.marks[m.marks_used], m.stream));
  return int(m.marks_used++);
}

double CudaOps::do_seconds(int a, int b) {
  Impl& m = *impl_;
  FSDP_CHECK(a >= 0 && b >= 0 && size_t(a) < m.marks_used && size_t(b) < m.marks_used,
             "timing marks ", a, ", ", b, " of ", m.marks_used);
  FSDP_CUDA_CHECK(cudaEventSynchronize(m.marks[size_t(b)]));
  float ms = 0;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, m.marks[size_t(a)], m.marks[size_t(b)]));
  return double(ms) / 1e3;
}

void CudaOps::do_clear_marks() {
  impl_->marks_used = 0;
}

std::vector<std::string> CudaOps::runtime_report() const {
  const Impl& m = *impl_;
  cudaDeviceProp prop{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, m.device));
  int driver = 0, runtime = 0;
  FSDP_CUDA_CHECK(cudaDriverGetVersion(&driver));
  FSDP_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const size_t cublas = cublasLtGetVersion(), cudnn = cudnnGetVersion();
  std::ostringstream os;
  os << "GPU " << m.device << ": " << prop.name << " (sm_" << prop.major << prop.minor << ", "
     << prop.multiProcessorCount << " SMs, " << (prop.totalGlobalMem >> 20) << " MiB), driver "
     << cuda_version_text(driver) << ", CUDA runtime " << cuda_version_text(runtime)
     << ", cuBLASLt " << cublas / 10000 << "." << cublas / 100 % 100 << "." << cublas % 100
     << ", cuDNN " << cudnn / 10000 << "." << cudnn / 100 % 100 << "." << cudnn % 100;
  std::vector<std::string> lines = {os.str()};
  for (const std::string& e : m.attention->engines()) lines.push_back(e);
  for (const std::string& e : m.gemm->choices()) lines.push_back(e);
  return lines;
}

CudaOps::~CudaOps() {
  Impl& m = *impl_;
  // Destructors must not throw: errors here are ignored.
  cudaStreamSynchronize(m.stream);
  m.attention.reset();
  m.gemm.reset();
  for (cudaEvent_t e : m.marks) cudaEventDestroy(e);
  for (auto& [key, p] : m.rope_tables) cudaFreeAsync(p, m.stream);
  if (m.scratch) cudaFreeAsync(m.scratch, m.stream);
  if (m.ns_work) cudaFreeAsync(m.ns_work, m.stream);
  if (m.doc_work) cudaFreeAsync(m.doc_work, m.stream);
  cudaStreamSynchronize(m.stream);
  cudaFree(m.err);
  cudaFreeHost(m.host_words);
  cudaStreamDestroy(m.stream);
}

void* CudaOps::stream() {
  return impl_->stream;
}

void CudaOps::synchronize() {
  impl_->sync("synchronize");
}

int64_t CudaOps::peak_device_bytes() const {
  return impl_->peak;
}

int64_t CudaOps::free_memory_bytes() const {
  FSDP_CUDA_CHECK(cudaSetDevice(impl_->device));
  size_t free_bytes = 0, total_bytes = 0;
  FSDP_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(free_bytes);
}

void CudaOps::after(const char* op) {
  if (impl_->opt.sync_each_op) impl_->sync(op);
}

// ---- memory -----------------------------------------------------------------

Tensor CudaOps::do_alloc(DType dtype, int64_t numel) {
  if (numel == 0) return {nullptr, dtype, 0};
  const size_t bytes = size_t(numel) * dtype_size(dtype);
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes, impl_->stream);
  if (e != cudaSuccess) {
    // Clear the error, or the next launch check (cudaGetLastError) would
    // report it again as that kernel's failure.
    cudaGetLastError();
    throw_error("cuda backend: out of device memory allocating ", bytes, " bytes (", impl_->live,
                " bytes held): ", cudaGetErrorString(e));
  }
  impl_->live += int64_t(bytes);
  impl_->peak = std::max(impl_->peak, impl_->live);
  return {p, dtype, numel};
}

void CudaOps::do_free(Tensor t) {
  if (!t.data) return;
  FSDP_CUDA_CHECK(cudaFreeAsync(t.data, impl_->stream));
  impl_->live -= int64_t(t.bytes());
}

void CudaOps::do_zero(Tensor t) {
  if (t.numel > 0) FSDP_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), impl_->stream));
}

void CudaOps::do_copy(Tensor dst, Tensor src) {
  if (dst.numel > 0 && dst.data != src.data)
    FSDP_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, src.data, dst.bytes(), cudaMemcpyDeviceToDevice, impl_->stream));
}

void CudaOps::do_to_device(Tensor dst, const void* host) {
  if (dst.numel > 0)
    FSDP_CUDA_CHECK(
        cudaMemcpyAsync(dst.data, host, dst.bytes(), cudaMemcpyHostToDevice, impl_->stream));
}

void CudaOps::do_to_host(void* host, Tensor src) {
  if (src.numel > 0)
    FSDP_CUDA_CHECK(
        cudaMemcpyAsync(host, src.data, src.bytes(), cudaMemcpyDeviceToHost, impl_->stream));
  impl_->sync("to_host");
}

// ---- GEMMs (gemm.cpp) and attention (attention.cpp) -------------------------
// The kernels' ops live beside their kernels, one .cu per family.

// Row-major to cuBLASLt's column-major: a row-major [r, c] matrix is, byte
// for byte, the column-major [c, r] matrix (its transpose) with leading
// dimension c. So each product is computed transposed, on the same memory:
//   y = x W^T     ->  y^T [N,M]  = (W^T [K,N])^T . x^T [K,M]      "TN", lda K, ldb K, ldd N
//   dx = dy W     ->  dx^T [K,M] = W^T [K,N] . dy^T [N,M]          "NN", lda K, ldb N, ldd K
//   dw += dy^T x  ->  dw^T [K,N] = x^T [K,M] . (dy^T [N,M])^T      "NT", lda K, ldb N, ldd K
// where X^T [a,b] names the column-major view of row-major X. No copies.
void CudaOps::do_linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) {
  bf16* yo = bf(y);
  const bf16* xi = bf(x);
  const bf16* wi = bf(w);
  impl_->gemm->matmul(true, false, N, M, K, wi, K, xi, K, yo, false, N, 0.0f);
  after("linear");
}

// As linear, with beta 1 and C = r: the residual is added in the epilogue.
void CudaOps::do_linear_add(Tensor y, Tensor x, Tensor w, Tensor r, int M, int N, int K) {
  bf16* yo = bf(y);
  const bf16* xi = bf(x);
  const bf16* wi = bf(w);
  const bf16* ri = bf(r);
  impl_->gemm->matmul(true, false, N, M, K, wi, K, xi, K, yo, false, N, 1.0f, ri);
  after("linear_add");
}

void CudaOps::do_linear_backward(Tensor dx, Tensor dw, Tensor dy, Tensor x, Tensor w, int M, int N,
                                 int K, bool accumulate_dx) {
  const bf16* dyi = bf(dy);
  if (dx.numel > 0) {
    bf16* dxo = bf(dx);
    const bf16* wi = bf(w);
    impl_->gemm->matmul(false, false, K, M, N, wi, K, dyi, N, dxo, false, K,
                        accumulate_dx ? 1.0f : 0.0f);
  }
  bool dw_bf16 = false;
  void* dwo = grad(dw, dw_bf16);
  const bf16* xi = bf(x);
  impl_->gemm->matmul(false, true, K, N, M, xi, K, dyi, N, dwo, !dw_bf16, K, 1.0f);
  after("linear_backward");
}

namespace {
int fp8_code(Fp8 f) {
  return f == Fp8::e4m3 ? 1 : 2;
}
const uint8_t* codes(const Fp8Tensor& t) {
  return static_cast<const uint8_t*>(t.codes.data);
}
}  // namespace

// As linear (y^T = W x^T in cuBLASLt's column-major view), on FP8 codes:
// W is A with its scale, x is B with its; r, when given, is C with beta 1.
void CudaOps::do_linear_fp8(Tensor y, const Fp8Tensor& x, const Fp8Tensor& w, Tensor r, int M,
                            int N, int K) {
  const uint8_t* xq = codes(x);
  const uint8_t* wq = codes(w);
  bf16* yo = bf(y);
  const bf16* ro = r.numel > 0 ? bf(r) : nullptr;
  impl_->gemm->matmul_fp8(N, M, K, wq, K, fp8_code(w.format), f32(w.scale_inv), xq, K,
                          fp8_code(x.format), f32(x.scale_inv), yo, false, N, ro ? 1.0f : 0.0f, ro);
  after("linear_fp8");
}

// Both products in the "TN" form, from the transposed codes:
//   dx^T [K, M] = (wt [K, N] row-major)^T-view . dy: A = wt (lda N), B = dy (ldb N)
//   dw^T [K, N] += x^T . dy: A = xt [K, M] (lda M), B = dyt [N, M] (ldb M)
void CudaOps::do_linear_backward_fp8(Tensor dx, Tensor dw, const Fp8Tensor& dy,
                                     const Fp8Tensor& dyt, const Fp8Tensor& xt, const Fp8Tensor& wt,
                                     int M, int N, int K, bool accumulate_dx) {
  const uint8_t* g = codes(dy);
  const uint8_t* gt = codes(dyt);
  const uint8_t* xq = codes(xt);
  const uint8_t* wq = codes(wt);
  const float* gs = f32(dy.scale_inv);
  if (dx.numel > 0)
    impl_->gemm->matmul_fp8(K, M, N, wq, N, fp8_code(wt.format), f32(wt.scale_inv), g, N,
                            fp8_code(dy.format), gs, bf(dx), false, K, accumulate_dx ? 1.0f : 0.0f);
  bool dw_bf16 = false;
  void* dwo = grad(dw, dw_bf16);
  impl_->gemm->matmul_fp8(K, N, M, xq, M, fp8_code(xt.format), f32(xt.scale_inv), gt, M,
                          fp8_code(dyt.format), f32(dyt.scale_inv), dwo, !dw_bf16, K, 1.0f);
  after("linear_backward_fp8");
}

// --document-mask: cuDNN's ragged attention reads the documents' first
// tokens (Documents::first); the per-token starts are the CPU reference's.
static cuda::DocumentRuns runs(const Documents& docs, cuda::Scratch& work) {
  if (docs.empty()) return {};
  return {static_cast<const int32_t*>(docs.first.data), docs.count(), &work};
}

void CudaOps::do_attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                           int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                           const Documents& docs) {
  const cuda::AttentionShape s{B, T, n_head, n_kv_head, head_dim, v_ld};
  impl_->attention->forward(s, bf(out), f32(lse), bf(q), bf(k), bf(v), *impl_,
                            runs(docs, impl_->doc_scratch));
  after("attention");
}

void CudaOps::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                                    Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                                    int n_head, int n_kv_head, int head_dim, int64_t v_ld,
                                    const Documents& docs) {
  const cuda::AttentionShape s{B, T, n_head, n_kv_head, head_dim, v_ld};
  impl_->attention->backward(s, bf(dq), bf(dk), bf(dv), bf(dout), bf(out), f32(lse), bf(q), bf(k),
                             bf(v), *impl_, runs(docs, impl_->doc_scratch));
  after("attention_backward");
}

}  // namespace fsdp
