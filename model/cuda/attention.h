// Causal grouped-query attention through cuDNN's fused SDPA (cudnn-frontend
// graph API), forward and backward, one built graph per shape, cached.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "model/cuda/kernels.h"

namespace fsdp::cuda {

struct AttentionShape {
  int B, T, H, Hkv, hd;
  int64_t v_ld;  // elements between token rows of v and dv (Hkv * hd when packed)
};

class Attention {
 public:
  // allow_fallback (--debug): accept cuDNN's slow FALLBACK engine for shapes
  // the fast ones do not cover, instead of stopping with an error.
  Attention(cudaStream_t stream, bool deterministic, bool allow_fallback);
  ~Attention();
  Attention(const Attention&) = delete;
  Attention& operator=(const Attention&) = delete;

  // q, out: [B, T, H, hd] bf16; k, v: [B, T, Hkv, hd] bf16 (v's token rows
  // s.v_ld apart); lse: [B, H, T] f32.
  void forward(const AttentionShape& s, void* out, float* lse, const void* q, const void* k,
               const void* v, Scratch& scratch);
  void backward(const AttentionShape& s, void* dq, void* dk, void* dv, const void* dout,
                const void* out, const float* lse, const void* q, const void* k, const void* v,
                Scratch& scratch);

  // One line per graph built so far: shape, cuDNN engine (plan) name, workspace.
  const std::vector<std::string>& engines() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdp::cuda
