// --document-mask on cuDNN: the per-call tables of its ragged (THD) attention
// and the moves of its softmax statistics between cuDNN's packed layout and
// ours.
//
// cuDNN runs each document as one "sequence" of a batch of `padded`
// documents (a power of two at least `count`, so that few graphs serve every
// micro-batch); the documents past `count` are empty. A document's rows are
// found through ragged offsets (the element where its first token's row
// starts in q, k, v and the statistics) and its length through seq_len.
// Documents tile the micro-batch's B*T tokens in order, so every offset is
// the document's first token times the row width of that tensor.
#include "model/cuda/attention.h"
#include "model/cuda/device_utils.cuh"

namespace fsdp::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void document_tables_kernel(DocumentTables t, const int32_t* first, int count,
                                       int padded, int64_t q_row, int64_t k_row, int64_t v_row,
                                       int64_t stats_row) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i > padded) return;
  const int64_t a = first[i < count ? i : count];  // past count: the end, B*T
  t.off_q[i] = a * q_row;
  t.off_k[i] = a * k_row;
  t.off_v[i] = a * v_row;
  t.off_stats[i] = a * stats_row;
  if (i < padded) t.seq_len[i] = i < count ? first[i + 1] - first[i] : 0;
}

// lse[b, h, t] <-> stats[(b * T + t) * H + h]: ours is per head, cuDNN's
// ragged one per token.
__global__ void stats_move_kernel(float* dst, const float* src, int64_t n, int T, int H,
                                  bool to_lse) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i % T, h = (i / T) % H, b = i / (int64_t(T) * H);  // i in lse's order
    const int64_t j = (b * T + t) * H + h;
    if (to_lse)
      dst[i] = src[j];
    else
      dst[j] = src[i];
  }
}

}  // namespace

void document_tables(const DocumentTables& t, const int32_t* first, int count, int padded,
                     int64_t q_row, int64_t k_row, int64_t v_row, int64_t stats_row,
                     cudaStream_t stream) {
  document_tables_kernel<<<blocks_for(padded + 1, kThreads), kThreads, 0, stream>>>(
      t, first, count, padded, q_row, k_row, v_row, stats_row);
  FSDP_LAUNCH_CHECK("document_tables_kernel");
}

void stats_to_lse(float* lse, const float* stats, int B, int T, int H, cudaStream_t stream) {
  const int64_t n = int64_t(B) * T * H;
  stats_move_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(lse, stats, n, T, H,
                                                                              true);
  FSDP_LAUNCH_CHECK("stats_move_kernel");
}

void lse_to_stats(float* stats, const float* lse, int B, int T, int H, cudaStream_t stream) {
  const int64_t n = int64_t(B) * T * H;
  stats_move_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream>>>(stats, lse, n, T, H,
                                                                              false);
  FSDP_LAUNCH_CHECK("stats_move_kernel");
}

}  // namespace fsdp::cuda
