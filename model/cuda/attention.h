// Causal grouped-query attention through cuDNN's fused SDPA (cudnn-frontend
// graph API), forward and backward, one built graph per shape, cached. With
// documents (--document-mask), cuDNN's ragged (THD) form of the same graph:
// each document a sequence of its own (attention_documents.cu).
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

// --document-mask: the micro-batch's documents (model/documents.h's
// Documents::first on the device, its count on the host); count 0: none.
// work: where the call keeps its tables and statistics, a region apart from
// the scratch that cuDNN's workspace comes from (which may move meanwhile).
struct DocumentRuns {
  const int32_t* first = nullptr;
  int count = 0;
  Scratch* work = nullptr;
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
               const void* v, Scratch& scratch, const DocumentRuns& docs = {});
  void backward(const AttentionShape& s, void* dq, void* dk, void* dv, const void* dout,
                const void* out, const float* lse, const void* q, const void* k, const void* v,
                Scratch& scratch, const DocumentRuns& docs = {});

  // One line per graph built so far: shape, cuDNN engine (plan) name, workspace.
  const std::vector<std::string>& engines() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// cudnn-frontend's own checks of the graph a shape, direction and document
// count get (0: no documents), for a GPU of compute capability `sm` (90:
// H100), made without one: "" when they pass, else their message. CI has no
// GPU; this catches there a graph description cuDNN would refuse.
std::string check_graph(int sm, const AttentionShape& s, bool backward, bool deterministic,
                        int documents);

// ---- attention_documents.cu: the ragged graphs' per-call inputs -------------
// For `padded` documents (count real ones, then empty ones): seq_len[padded]
// and the ragged offsets [padded + 1] of q (also out, dout, dq), k (dk), v
// (dv) and the statistics, each the document's first token times `*_row`.
struct DocumentTables {
  int32_t* seq_len;
  int64_t *off_q, *off_k, *off_v, *off_stats;
};
void document_tables(const DocumentTables& t, const int32_t* first, int count, int padded,
                     int64_t q_row, int64_t k_row, int64_t v_row, int64_t stats_row,
                     cudaStream_t stream);
// Our lse [B, H, T] from cuDNN's ragged statistics [B * T, H], and back.
void stats_to_lse(float* lse, const float* stats, int B, int T, int H, cudaStream_t stream);
void lse_to_stats(float* stats, const float* lse, int B, int T, int H, cudaStream_t stream);

}  // namespace fsdp::cuda
