#include "model/cuda/attention.h"

#include <cudnn_frontend.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/cuda_lib_check.h"

namespace fsdp::cuda {
namespace {

namespace fe = cudnn_frontend;
using GraphPtr = std::shared_ptr<fe::graph::Graph>;

// Tensor ids in the variant pack; ragged graphs (--document-mask) add the
// documents' lengths and offsets.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };
enum RaggedUid : int64_t { kSeqQ = kdV + 1, kSeqKV, kOffQ, kOffK, kOffV, kOffStats };

void check_fe(fe::error_t e, const char* what, const AttentionShape& s) {
  if (e.is_bad())
    throw_error("cuDNN SDPA ", what, " (B=", s.B, " T=", s.T, " heads=", s.H, " kv_heads=", s.Hkv,
                " head_dim=", s.hd, "): ", e.get_message());
}

// --document-mask: the documents a ragged graph is built for, the count
// rounded up to a power of two (the rest are empty), so that a run builds a
// handful of graphs, not one per count; 0 without documents.
int padded_documents(int count) {
  return count > 0 ? int(std::bit_ceil(unsigned(count))) : 0;
}

// A ragged graph's index tensors: [n, 1, 1, 1] of seq_len (i32) or offsets (i64).
fe::graph::Tensor_attributes index(const char* name, int64_t uid, int64_t n, fe::DataType_t t) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({n, 1, 1, 1})
      .set_stride({1, 1, 1, 1})
      .set_data_type(t);
}

// Our activations are [B, T, heads, hd] row-major; cuDNN names dimensions
// (B, heads, T, hd) and takes any strides, so the same memory is described
// without a transpose.
std::vector<int64_t> bhsd_dim(const AttentionShape& s, int heads) {
  return {s.B, heads, s.T, s.hd};
}
// row: elements from one token to the next (heads * hd when packed).
std::vector<int64_t> bhsd_stride(const AttentionShape& s, int heads, int64_t row = 0) {
  if (row == 0) row = int64_t(heads) * s.hd;
  return {int64_t(s.T) * row, s.hd, row, 1};
}

fe::graph::Tensor_attributes tensor(const char* name, int64_t uid, const AttentionShape& s,
                                    int heads, int64_t row = 0) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim(bhsd_dim(s, heads))
      .set_stride(bhsd_stride(s, heads, row));
}

// Softmax statistics: log-sum-exp per (b, h, t) in f32, [B, H, T, 1] packed,
// which is exactly our lse [B, H, T]. Ragged: per token, [B*T, H] (cuDNN's
// THD statistics), moved to and from our lse around the call.
fe::graph::Tensor_attributes& stats_layout(fe::graph::Tensor_attributes& t, const AttentionShape& s,
                                           bool ragged) {
  return t.set_dim({s.B, s.H, s.T, 1})
      .set_stride(ragged ? std::vector<int64_t>{int64_t(s.H) * s.T, 1, s.H, 1}
                         : std::vector<int64_t>{int64_t(s.H) * s.T, s.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

// sm: the GPU generation the graph is checked for (check_graph); 0: the
// current device's.
GraphPtr new_graph(int sm) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm > 0) g->set_sm_version(sm);
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float scale_of(const AttentionShape& s) {
  return float(1.0 / std::sqrt(double(s.hd)));
}

// The SDPA graph of one shape and direction, not yet built. docs > 0: the
// ragged graph of that many documents (padded_documents), each a sequence
// of at most T tokens found through offsets, causal within itself (cuDNN's
// padding mask with per-document lengths, the causal mask top-left
// aligned); B*T tokens in all bound its workspace.
GraphPtr describe_graph(const AttentionShape& shape, bool backward, bool deterministic, int docs,
                        int sm = 0) {
  const bool ragged = docs > 0;
  AttentionShape s = shape;
  if (ragged) s.B = docs;
  const int64_t tokens = int64_t(shape.B) * shape.T;
  GraphPtr g = new_graph(sm);
  using TA = std::shared_ptr<fe::graph::Tensor_attributes>;
  TA seq_q, seq_kv, off_q, off_k, off_v, off_stats;
  if (ragged) {
    seq_q = g->tensor(index("seq_q", kSeqQ, docs, fe::DataType_t::INT32));
    seq_kv = g->tensor(index("seq_kv", kSeqKV, docs, fe::DataType_t::INT32));
    off_q = g->tensor(index("off_q", kOffQ, docs + 1, fe::DataType_t::INT64));
    off_k = g->tensor(index("off_k", kOffK, docs + 1, fe::DataType_t::INT64));
    off_v = g->tensor(index("off_v", kOffV, docs + 1, fe::DataType_t::INT64));
    off_stats = g->tensor(index("off_stats", kOffStats, docs + 1, fe::DataType_t::INT64));
  }
  // A tensor described by its rows, with the documents' offsets when ragged.
  auto rows = [&](fe::graph::Tensor_attributes t, const TA& off) {
    if (ragged) t.set_ragged_offset(off);
    return t;
  };
  auto out_rows = [&](const TA& t, int64_t uid, int heads, const TA& off, int64_t row = 0) {
    t->set_output(true)
        .set_uid(uid)
        .set_dim(bhsd_dim(s, heads))
        .set_stride(bhsd_stride(s, heads, row));
    if (ragged) t->set_ragged_offset(off);
  };
  // Ragged: each document's length, under the padding mask (the same
  // attributes forward and backward, of two types).
  auto per_document = [&](auto& opts) {
    if (ragged)
      opts.set_padding_mask(true)
          .set_seq_len_q(seq_q)
          .set_seq_len_kv(seq_kv)
          .set_max_total_seq_len_q(tokens)
          .set_max_total_seq_len_kv(tokens);
  };
  auto Q = g->tensor(rows(tensor("Q", kQ, s, s.H), off_q));
  auto K = g->tensor(rows(tensor("K", kK, s, s.Hkv), off_k));
  auto V = g->tensor(rows(tensor("V", kV, s, s.Hkv, s.v_ld), off_v));
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("sdpa_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(scale_of(s));
    per_document(opts);
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    out_rows(O, kO, s.H, off_q);
    stats->set_output(true).set_uid(kStats);
    stats_layout(*stats, s, ragged);
    if (ragged) stats->set_ragged_offset(off_stats);
  } else {
    auto O = g->tensor(rows(tensor("O", kO, s, s.H), off_q));
    auto dO = g->tensor(rows(tensor("dO", kdO, s, s.H), off_q));
    fe::graph::Tensor_attributes st;
    st.set_name("stats").set_uid(kStats);
    auto stats = g->tensor(rows(stats_layout(st, s, ragged), off_stats));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("sdpa_backward")
                    .set_causal_mask(true)
                    .set_attn_scale(scale_of(s))
                    .set_deterministic_algorithm(deterministic);
    per_document(opts);
    // With fewer kv heads, cuDNN sums dK and dV over each head group itself.
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    out_rows(dQ, kdQ, s.H, off_q);
    out_rows(dK, kdK, s.Hkv, off_k);
    out_rows(dV, kdV, s.Hkv, off_v, s.v_ld);
  }
  return g;
}

}  // namespace

// One shape and direction: the graph with every plan heuristic A offers
// built, and the plan chosen by timing them on the first call's own buffers.
struct Built {
  GraphPtr g;
  bool fallback = false;
  bool chosen = false;  // timed (or only one plan)
  int64_t plan = 0, ws = 0;
};

struct Attention::Impl {
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  bool deterministic = false, allow_fallback = false;
  std::vector<std::string> engines;  // one line per shape and direction, for the log
  // Key: B, T, H, Hkv, hd, v_ld, backward, documents (padded; 0: not ragged).
  std::map<std::tuple<int, int, int, int, int, int64_t, bool, int>, Built> graphs;

  Built& graph(const AttentionShape& s, bool backward, int docs);
  void choose(Built& b, const AttentionShape& s, bool backward, int docs,
              std::unordered_map<int64_t, void*>& pack, Scratch& scratch);
  void run(const AttentionShape& s, bool backward, int docs,
           std::unordered_map<int64_t, void*>& pack, Scratch& scratch);
  // The ragged inputs of one call, written on the stream: the documents'
  // tables into the pack, and the statistics buffer ([B*T, H] f32) returned.
  float* tables(const AttentionShape& s, const DocumentRuns& d, int docs,
                std::unordered_map<int64_t, void*>& pack);
};

Attention::Attention(cudaStream_t stream, bool deterministic, bool allow_fallback)
    : impl_(std::make_unique<Impl>()) {
  impl_->stream = stream;
  impl_->deterministic = deterministic;
  impl_->allow_fallback = allow_fallback;
  FSDP_CUDNN_CHECK(cudnnCreate(&impl_->handle));
  FSDP_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
}

Attention::~Attention() {
  impl_->graphs.clear();  // plans go before the handle they were built on
  cudnnDestroy(impl_->handle);
}

float* Attention::Impl::tables(const AttentionShape& s, const DocumentRuns& d, int docs,
                               std::unordered_map<int64_t, void*>& pack) {
  auto up = [](size_t n) { return (n + 255) / 256 * 256; };
  const size_t seq = up(sizeof(int32_t) * size_t(docs)), off = up(sizeof(int64_t) * (docs + 1));
  const size_t stats = sizeof(float) * size_t(s.B) * s.T * s.H;
  FSDP_CHECK(d.work, "attention over ", d.count, " documents: no region for their tables");
  char* p = static_cast<char*>(d.work->get(seq + 4 * off + stats));
  DocumentTables t{};
  t.seq_len = reinterpret_cast<int32_t*>(p);
  int64_t** offs[4] = {&t.off_q, &t.off_k, &t.off_v, &t.off_stats};
  for (int i = 0; i < 4; ++i) *offs[i] = reinterpret_cast<int64_t*>(p + seq + size_t(i) * off);
  document_tables(t, d.first, d.count, docs, int64_t(s.H) * s.hd, int64_t(s.Hkv) * s.hd, s.v_ld,
                  s.H, stream);
  pack[kSeqQ] = pack[kSeqKV] = t.seq_len;
  pack[kOffQ] = t.off_q;
  pack[kOffK] = t.off_k;
  pack[kOffV] = t.off_v;
  pack[kOffStats] = t.off_stats;
  return reinterpret_cast<float*>(p + seq + 4 * off);
}

namespace {
// Every plan the heuristic lists that this GPU supports, built.
fe::error_t build_all(fe::graph::Graph& g, cudnnHandle_t handle, fe::HeurMode_t mode) {
  if (auto e = g.validate(); e.is_bad()) return e;
  if (auto e = g.build_operation_graph(handle); e.is_bad()) return e;
  if (auto e = g.create_execution_plans({mode}); e.is_bad()) return e;
  if (auto e = g.check_support(handle); e.is_bad()) return e;
  return g.build_plans(handle, fe::BuildPlanPolicy_t::ALL);
}
}  // namespace

Built& Attention::Impl::graph(const AttentionShape& s, bool backward, int docs) {
  const auto key = std::make_tuple(s.B, s.T, s.H, s.Hkv, s.hd, s.v_ld, backward, docs);
  auto it = graphs.find(key);
  if (it != graphs.end()) return it->second;

  const char* what = backward ? "backward" : "forward";
  // Heuristic A names the fast fused (flash) engines. Some shapes (unusual
  // head sizes, deterministic GQA backward) have none, and cuDNN's FALLBACK
  // engine runs them many times slower: a training run that silently lands
  // there is a performance bug, so only --debug accepts it.
  Built b;
  b.g = describe_graph(s, backward, deterministic, docs);
  if (fe::error_t e = build_all(*b.g, handle, fe::HeurMode_t::A); e.is_bad()) {
    if (docs > 0)
      throw_error("cuDNN has no fused-attention engine for the ", what, " pass over ", docs,
                  " documents (--document-mask; B=", s.B, " T=", s.T, " heads=", s.H,
                  " kv_heads=", s.Hkv, " head_dim=", s.hd, "): ", e.get_message(),
                  "; its ragged (THD) attention needs an H100 or newer and cuDNN 9.6 or newer");
    if (!allow_fallback)
      throw_error("cuDNN has no fast fused-attention engine for the ", what, " pass (B=", s.B,
                  " T=", s.T, " heads=", s.H, " kv_heads=", s.Hkv, " head_dim=", s.hd,
                  "): ", e.get_message(),
                  "; its FALLBACK engine is much slower, so it runs only under --debug. "
                  "head_dim 64 or 128 with T a multiple of 64 is supported everywhere");
    // A failed build leaves no usable graph.
    b.g = describe_graph(s, backward, deterministic, docs);
    check_fe(b.g->build(handle, {fe::HeurMode_t::FALLBACK}), what, s);
    b.fallback = true;
  }
  return graphs.emplace(key, std::move(b)).first->second;
}

// The plans differ in tiling and scheduling, not in what they compute, and
// the heuristic's first is not always the fastest here, so each is timed
// (best of three after a warm-up) on the first call's buffers: the outputs
// it overwrites are written again by the call itself. --debug keeps the
// heuristic's first (deterministic runs want no timing-dependent choice).
void Attention::Impl::choose(Built& b, const AttentionShape& s, bool backward, int docs,
                             std::unordered_map<int64_t, void*>& pack, Scratch& scratch) {
  const char* what = backward ? "backward" : "forward";
  const int64_t n = b.fallback ? 1 : b.g->get_execution_plan_count();
  std::vector<float> ms(size_t(n), -1.0f);
  if (n > 1 && !deterministic) {
    int64_t ws_max = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t w = 0;
      if (b.g->get_workspace_size_plan_at_index(i, w).is_good()) ws_max = std::max(ws_max, w);
    }
    void* workspace = ws_max > 0 ? scratch.get(size_t(ws_max)) : nullptr;
    cudaEvent_t e0, e1;
    FSDP_CUDA_CHECK(cudaEventCreate(&e0));
    FSDP_CUDA_CHECK(cudaEventCreate(&e1));
    for (int64_t i = 0; i < n; ++i) {
      if (b.g->execute_plan_at_index(handle, pack, workspace, i).is_bad()) continue;
      for (int rep = 0; rep < 3; ++rep) {
        FSDP_CUDA_CHECK(cudaEventRecord(e0, stream));
        (void)b.g->execute_plan_at_index(handle, pack, workspace, i);
        FSDP_CUDA_CHECK(cudaEventRecord(e1, stream));
        FSDP_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        FSDP_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        if (ms[size_t(i)] < 0 || t < ms[size_t(i)]) ms[size_t(i)] = t;
      }
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (int64_t i = 0; i < n; ++i)
      if (ms[size_t(i)] >= 0 && (ms[size_t(b.plan)] < 0 || ms[size_t(i)] < ms[size_t(b.plan)]))
        b.plan = i;
  }
  check_fe(b.g->get_workspace_size_plan_at_index(b.plan, b.ws), what, s);
  b.chosen = true;

  std::ostringstream line;
  auto name = [&](int64_t i) {
    std::string p;
    if (b.g->get_plan_name_at_index(i, p).is_bad()) p = "(unnamed)";
    return p;
  };
  line << "cuDNN SDPA " << what << " B=" << s.B << " T=" << s.T << " heads=" << s.H << "/" << s.Hkv
       << " head_dim=" << s.hd << " v_ld=" << s.v_ld
       << (s.v_ld != int64_t(s.Hkv) * s.hd ? " (strided)" : "")
       << (docs > 0 ? " ragged, " + std::to_string(docs) + " documents" : "") << ": "
       << name(b.plan) << (b.fallback ? " [FALLBACK]" : "") << ", workspace " << b.ws << " B";
  if (ms[size_t(b.plan)] >= 0) {
    line << "; timed " << n << " plans:";
    for (int64_t i = 0; i < n; ++i)
      line << " " << name(i)
           << (ms[size_t(i)] >= 0 ? " " + std::to_string(ms[size_t(i)]) : " failed")
           << (ms[size_t(i)] >= 0 ? " ms" : "");
  }
  engines.push_back(line.str());
}

std::string check_graph(int sm, const AttentionShape& s, bool backward, bool deterministic,
                        int documents) {
  const GraphPtr g = describe_graph(s, backward, deterministic, padded_documents(documents), sm);
  fe::error_t e = g->validate();
  return e.is_good() ? "" : e.get_message();
}

const std::vector<std::string>& Attention::engines() const {
  return impl_->engines;
}

void Attention::Impl::run(const AttentionShape& s, bool backward, int docs,
                          std::unordered_map<int64_t, void*>& pack, Scratch& scratch) {
  Built& b = graph(s, backward, docs);
  if (!b.chosen) choose(b, s, backward, docs, pack, scratch);
  void* workspace = b.ws > 0 ? scratch.get(size_t(b.ws)) : nullptr;
  check_fe(b.g->execute_plan_at_index(handle, pack, workspace, b.plan),
           backward ? "backward" : "forward", s);
}

void Attention::forward(const AttentionShape& s, void* out, float* lse, const void* q,
                        const void* k, const void* v, Scratch& scratch, const DocumentRuns& docs) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, out},
                                             {kStats, lse}};
  const int padded = padded_documents(docs.count);
  if (padded == 0) return impl_->run(s, false, 0, pack, scratch);
  float* stats = impl_->tables(s, docs, padded, pack);
  pack[kStats] = stats;
  impl_->run(s, false, padded, pack, scratch);
  stats_to_lse(lse, stats, s.B, s.T, s.H, impl_->stream);
}

void Attention::backward(const AttentionShape& s, void* dq, void* dk, void* dv, const void* dout,
                         const void* out, const float* lse, const void* q, const void* k,
                         const void* v, Scratch& scratch, const DocumentRuns& docs) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, const_cast<void*>(out)},
                                             {kdO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kdQ, dq},
                                             {kdK, dk},
                                             {kdV, dv}};
  const int padded = padded_documents(docs.count);
  if (padded == 0) return impl_->run(s, true, 0, pack, scratch);
  float* stats = impl_->tables(s, docs, padded, pack);
  lse_to_stats(stats, lse, s.B, s.T, s.H, impl_->stream);
  pack[kStats] = stats;
  impl_->run(s, true, padded, pack, scratch);
}

}  // namespace fsdp::cuda
