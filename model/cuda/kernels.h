// What the kernel files share: the bf16 type, the scratch and error word
// CudaOps gives them, and the launchers one family's .cu calls from
// another's (RMSNorm's, which the fused QK-norm in rope.cu falls back on;
// sum_squares, which Muon's norms use). Every other launcher is private to
// its .cu, beside the CudaOps methods that call it.
// Each enqueues its work on `stream` and checks the launch; sizes and dtypes
// were validated by Ops' front door before the call. Pointers are device
// pointers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace fsdp::cuda {

using bf16 = __nv_bfloat16;

// Device scratch for kernels that need temporaries (partial sums, sort
// buffers). One region per call: everything runs on one stream, so the next
// call may reuse it.
class Scratch {
 public:
  virtual ~Scratch() = default;
  virtual void* get(size_t bytes) = 0;
};

// Codes a kernel writes into the device error word (first one wins); CudaOps
// turns them into fsdp::Error at the next synchronisation.
enum ErrorCode : int { kNoError = 0, kTokenOutOfRange = 1, kTargetOutOfRange = 2 };

struct DeviceInfo {
  int sm_count = 132;
};

// ---- rmsnorm.cu ------------------------------------------------------------------
// amax: null, or an f32 word that gets max |y| as stored.
void rmsnorm_forward(bf16* y, float* rstd, const bf16* x, const bf16* g, int rows, int dim,
                     float eps, float* amax, cudaStream_t stream);
// dg is bf16 when dg_bf16, else f32. amax: null, or an f32 word that gets
// max |dx| as stored.
void rmsnorm_backward(bf16* dx, void* dg, bool dg_bf16, const bf16* dy, const bf16* x,
                      const bf16* g, const float* rstd, int rows, int dim, bool accumulate_dx,
                      float* amax, const DeviceInfo& dev, Scratch& scratch, cudaStream_t stream);
// dg[dim] += the sum of `blocks` partial rows partial[blocks, dim] (f32), added
// in block order: the last step of every RMSNorm-style backward.
void rmsnorm_dg_reduce(void* dg, bool dg_bf16, const float* partial, int blocks, int dim,
                       cudaStream_t stream);

// ---- adamw.cu --------------------------------------------------------------------
// Writes the sum of squares into *result (device memory; summed in double).
void sum_squares(double* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream);
void sum_squares(float* result, const float* x, int64_t n, const DeviceInfo& dev, Scratch& scratch,
                 cudaStream_t stream);

}  // namespace fsdp::cuda
