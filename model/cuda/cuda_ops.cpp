#include "model/cuda/cuda_ops.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "model/cuda/cuda_ops_impl.h"

namespace fsdp {

using namespace cuda_args;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
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
     << driver / 1000 << "." << driver % 1000 / 10 << ", CUDA runtime " << runtime / 1000 << "."
     << runtime % 1000 / 10 << ", cuBLASLt " << cublas / 10000 << "." << cublas / 100 % 100 << "."
     << cublas % 100 << ", cuDNN " << cudnn / 10000 << "." << cudnn / 100 % 100 << "."
     << cudnn % 100;
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

// ---- model ------------------------------------------------------------------

void CudaOps::do_embedding(Tensor out, Tensor tokens, Tensor wte, int n, int C) {
  bf16* o = bf(out);
  const bf16* w = bf(wte);
  cuda::embedding_forward(o, i32(tokens), w, n, C, wte.numel / C, impl_->err, impl_->stream);
  after("embedding");
}

void CudaOps::do_embedding_backward(Tensor dwte, Tensor dout, Tensor tokens, int n, int C) {
  bool is_bf16 = false;
  void* dw = grad(dwte, is_bf16);
  cuda::embedding_backward(dw, is_bf16, bf(dout), i32(tokens), n, C, dwte.numel / C, *impl_,
                           impl_->stream);
  after("embedding_backward");
}

void CudaOps::do_rmsnorm(Tensor y, Tensor rstd, Tensor x, Tensor g, int rows, int dim, float eps,
                         Tensor amax) {
  cuda::rmsnorm_forward(bf(y), f32(rstd), bf(x), bf(g), rows, dim, eps, f32_or_null(amax),
                        impl_->stream);
  after("rmsnorm");
}

void CudaOps::do_rmsnorm_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g, Tensor rstd,
                                  int rows, int dim, bool accumulate_dx, Tensor amax) {
  bool dg_bf16 = false;
  void* dgp = grad(dg, dg_bf16);
  cuda::rmsnorm_backward(bf(dx), dgp, dg_bf16, bf(dy), bf(x), bf(g), f32(rstd), rows, dim,
                         accumulate_dx, f32_or_null(amax), impl_->dev, *impl_, impl_->stream);
  after("rmsnorm_backward");
}

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

void CudaOps::do_rope(Tensor x, int B, int T, int heads, int head_dim, const Rope& rope) {
  bf16* xp = bf(x);
  cuda::rope(xp, impl_->rope_table(T, head_dim, rope), B, T, heads, head_dim, 1.0f, impl_->stream);
  after("rope");
}

void CudaOps::do_rope_backward(Tensor dx, int B, int T, int heads, int head_dim, const Rope& rope) {
  bf16* xp = bf(dx);
  cuda::rope(xp, impl_->rope_table(T, head_dim, rope), B, T, heads, head_dim, -1.0f, impl_->stream);
  after("rope_backward");
}

namespace {
void copy_rows(void* dst, int64_t dst_ld, const void* src, int64_t src_ld, int64_t rows,
               int64_t width, cudaStream_t stream) {
  const size_t es = sizeof(cuda::bf16);
  if (rows > 0)
    FSDP_CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_ld) * es, src, size_t(src_ld) * es,
                                      size_t(width) * es, size_t(rows), cudaMemcpyDeviceToDevice,
                                      stream));
}
}  // namespace

// Head sizes the fused kernels do not take (96, say) compose rmsnorm and
// rope; strided rows are then packed into a temporary first (and dx
// unpacked after): a slow path, kept simple.
void CudaOps::do_norm_rope(Tensor y, Tensor rstd, Tensor x, Tensor g, int B, int T, int heads,
                           int head_dim, float eps, const Rope& rope, int64_t x_ld) {
  const int rows = B * T * heads;
  const int64_t tokens = int64_t(B) * T;
  const int64_t width = int64_t(heads) * head_dim;
  bf16* yo = bf(y);
  float* rs = f32(rstd);
  const bf16* xi = bf(x);
  const bf16* gi = bf(g);
  const float* table = impl_->rope_table(T, head_dim, rope);
  if (g.numel == 0) {  // no QK-norm: x's rows packed into y, then rotated
    copy_rows(yo, width, xi, x_ld, tokens, width, impl_->stream);
    cuda::rope(yo, table, B, T, heads, head_dim, 1.0f, impl_->stream);
  } else if (!cuda::norm_rope_forward(yo, rs, xi, gi, table, B, T, heads, head_dim, eps, x_ld,
                                      impl_->stream)) {
    if (x_ld != width) {  // y is free until written: the packed copy goes there
      copy_rows(yo, width, xi, x_ld, tokens, width, impl_->stream);
      xi = yo;
    }
    cuda::rmsnorm_forward(yo, rs, xi, gi, rows, head_dim, eps, nullptr, impl_->stream);
    cuda::rope(yo, table, B, T, heads, head_dim, 1.0f, impl_->stream);
  }
  after("norm_rope");
}

void CudaOps::do_norm_rope_backward(Tensor dx, Tensor dg, Tensor dy, Tensor x, Tensor g,
                                    Tensor rstd, int B, int T, int heads, int head_dim,
                                    const Rope& rope, Tensor amax, int64_t x_ld) {
  const int rows = B * T * heads;
  const int64_t n = int64_t(rows) * head_dim, tokens = int64_t(B) * T;
  const int64_t width = int64_t(heads) * head_dim;
  float* am = f32_or_null(amax);
  bool dg_bf16 = false;
  void* dgp = grad(dg, dg_bf16);
  bf16* dxo = bf(dx);
  bf16* dyi = bf(dy);
  const bf16* xi = bf(x);
  const bf16* gi = bf(g);
  const float* rs = f32(rstd);
  const float* table = impl_->rope_table(T, head_dim, rope);
  if (g.numel == 0) {
    // No QK-norm: dx is dy rotated back (in place: dy's contents are
    // unspecified after the call), written into dx's rows.
    cuda::rope(dyi, table, B, T, heads, head_dim, -1.0f, impl_->stream);
    copy_rows(dxo, x_ld, dyi, width, tokens, width, impl_->stream);
  } else if (!cuda::norm_rope_backward(dxo, dgp, dg_bf16, dyi, xi, gi, rs, table, B, T, heads,
                                       head_dim, am, x_ld, impl_->dev, *impl_, impl_->stream)) {
    // dy's contents are unspecified after the call (Ops::norm_rope_backward),
    // so it is rotated back in place.
    cuda::rope(dyi, table, B, T, heads, head_dim, -1.0f, impl_->stream);
    const bool strided = x_ld != width;
    Tensor packed = strided ? do_alloc(DType::bf16, 2 * n) : Tensor{};  // x, then dx
    bf16* xp = strided ? static_cast<bf16*>(packed.data) : const_cast<bf16*>(xi);
    bf16* dxp = strided ? xp + n : dxo;
    if (strided) copy_rows(xp, width, xi, x_ld, tokens, width, impl_->stream);
    cuda::rmsnorm_backward(dxp, dgp, dg_bf16, dyi, xp, gi, rs, rows, head_dim, false, am,
                           impl_->dev, *impl_, impl_->stream);
    if (strided) {
      copy_rows(dxo, x_ld, dxp, width, tokens, width, impl_->stream);
      do_free(packed);
    }
  }
  after("norm_rope_backward");
}

void CudaOps::do_attention(Tensor out, Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                           int n_head, int n_kv_head, int head_dim, int64_t v_ld) {
  const cuda::AttentionShape s{B, T, n_head, n_kv_head, head_dim, v_ld};
  impl_->attention->forward(s, bf(out), f32(lse), bf(q), bf(k), bf(v), *impl_);
  after("attention");
}

void CudaOps::do_attention_backward(Tensor dq, Tensor dk, Tensor dv, Tensor dout, Tensor out,
                                    Tensor lse, Tensor q, Tensor k, Tensor v, int B, int T,
                                    int n_head, int n_kv_head, int head_dim, int64_t v_ld) {
  const cuda::AttentionShape s{B, T, n_head, n_kv_head, head_dim, v_ld};
  impl_->attention->backward(s, bf(dq), bf(dk), bf(dv), bf(dout), bf(out), f32(lse), bf(q), bf(k),
                             bf(v), *impl_);
  after("attention_backward");
}

void CudaOps::do_swiglu(Tensor s, Tensor a, Tensor b, int rows, int cols, int64_t ab_ld,
                        Tensor amax) {
  cuda::swiglu_forward(bf(s), bf(a), bf(b), rows, cols, ab_ld, f32_or_null(amax), impl_->stream);
  after("swiglu");
}

void CudaOps::do_swiglu_backward(Tensor da, Tensor db, Tensor ds, Tensor a, Tensor b, int rows,
                                 int cols, int64_t ab_ld, Tensor amax) {
  cuda::swiglu_backward(bf(da), bf(db), bf(ds), bf(a), bf(b), rows, cols, ab_ld, f32_or_null(amax),
                        impl_->stream);
  after("swiglu_backward");
}

void CudaOps::do_add(Tensor y, Tensor a, Tensor b, int64_t n) {
  cuda::add(bf(y), bf(a), bf(b), n, impl_->stream);
  after("add");
}

void CudaOps::do_cross_entropy(Tensor losses, Tensor logits, Tensor targets, int n, int V, int Vp,
                               float grad_scale) {
  cuda::cross_entropy(f32(losses), bf(logits), i32(targets), n, V, Vp, grad_scale, impl_->err,
                      impl_->stream);
  after("cross_entropy");
}

// ---- optimizer and engine ---------------------------------------------------

void CudaOps::do_cast(Tensor dst, Tensor src) {
  if (dst.dtype == src.dtype) {
    do_copy(dst, src);
  } else if (dst.dtype == DType::bf16) {
    cuda::cast_f32_to_bf16(static_cast<bf16*>(dst.data), src.f32(), dst.numel, impl_->stream);
  } else {
    cuda::cast_bf16_to_f32(dst.f32(), static_cast<const bf16*>(src.data), dst.numel, impl_->stream);
  }
  after("cast");
}

void CudaOps::do_accumulate(Tensor dst, Tensor src, float scale) {
  float* d = dst.f32();
  const int64_t n = dst.numel;
  if (src.dtype == DType::bf16) {
    cuda::accumulate_bf16(d, static_cast<const bf16*>(src.data), scale, n, impl_->stream);
  } else {
    cuda::accumulate_f32(d, src.f32(), scale, n, impl_->stream);
  }
  after("accumulate");
}

double CudaOps::do_sum_squares(Tensor x) {
  const float* p = x.f32();
  if (x.numel == 0) return 0.0;
  cuda::sum_squares(impl_->ss, p, x.numel, impl_->dev, *impl_, impl_->stream);
  auto* host = reinterpret_cast<double*>(static_cast<char*>(impl_->host_words) + sizeof(double));
  FSDP_CUDA_CHECK(
      cudaMemcpyAsync(host, impl_->ss, sizeof(double), cudaMemcpyDeviceToHost, impl_->stream));
  impl_->sync("sum_squares");
  return *host;
}

void CudaOps::do_sum_squares_each(Tensor out, const std::vector<Tensor>& xs) {
  float* o = f32(out);
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].numel == 0) {
      FSDP_CUDA_CHECK(cudaMemsetAsync(o + i, 0, sizeof(float), impl_->stream));
      continue;
    }
    cuda::sum_squares(o + i, xs[i].f32(), xs[i].numel, impl_->dev, *impl_, impl_->stream);
  }
  after("sum_squares_each");
}

void CudaOps::do_adamw(Tensor param, Tensor grad_t, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                       const std::vector<AdamWSpan>& spans, const AdamWHyper& h, bool clear_grad) {
  const int64_t n = param.numel;
  float* p = param.f32();
  float* g = f32(grad_t);
  float* m = f32(exp_avg);
  float* v = f32(exp_avg_sq);
  bf16* s16 = nullptr;
  if (send.numel > 0 && send.data != param.data) {
    // The all-gather's copy is bf16 here; an f32 one is the parameter itself.
    FSDP_CHECK(send.dtype == DType::bf16, "adamw send is ", dtype_name(send.dtype),
               ", the cuda backend writes the all-gather's copy in bf16");
    s16 = bf(send);
  }
  // Step constants in double on the host, as the CPU reference computes them.
  const double bc1 = 1.0 - std::pow(double(h.beta1), h.step);
  const double bc2 = 1.0 - std::pow(double(h.beta2), h.step);
  const cuda::AdamWStep s{
      h.lr, h.beta1, h.beta2, h.eps, h.grad_scale, float(1.0 / bc1), float(1.0 / std::sqrt(bc2))};
  // Spans in launches of AdamWSpans::kMax (one for every unit of the model);
  // only the last writes the copy and clears, after every span has moved.
  size_t next = 0;
  do {
    cuda::AdamWSpans chunk;
    for (; next < spans.size() && chunk.n < cuda::AdamWSpans::kMax; ++next) {
      const AdamWSpan& sp = spans[next];
      chunk.begin[chunk.n] = sp.begin;
      chunk.end[chunk.n] = sp.begin + sp.count;
      chunk.decay[chunk.n] = float(1.0 - double(h.lr) * sp.weight_decay);
      ++chunk.n;
    }
    const bool last = next == spans.size();
    cuda::adamw(p, g, m, v, last ? s16 : nullptr, last && clear_grad, n, s, chunk, impl_->stream);
  } while (next < spans.size());
  after("adamw");
}

}  // namespace fsdp
