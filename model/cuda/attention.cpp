#include "model/cuda/attention.h"

#include <cudnn_frontend.h>

#include <algorithm>
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

// Tensor ids in the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV };

void check_fe(fe::error_t e, const char* what, const AttentionShape& s) {
  if (e.is_bad())
    throw_error("cuDNN SDPA ", what, " (B=", s.B, " T=", s.T, " heads=", s.H, " kv_heads=", s.Hkv,
                " head_dim=", s.hd, "): ", e.get_message());
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
// which is exactly our lse [B, H, T].
fe::graph::Tensor_attributes stats_attrs(const AttentionShape& s) {
  return fe::graph::Tensor_attributes()
      .set_name("stats")
      .set_uid(kStats)
      .set_dim({s.B, s.H, s.T, 1})
      .set_stride({int64_t(s.H) * s.T, s.T, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
}

GraphPtr new_graph() {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

float scale_of(const AttentionShape& s) {
  return float(1.0 / std::sqrt(double(s.hd)));
}

// The SDPA graph of one shape and direction, not yet built.
GraphPtr describe_graph(const AttentionShape& s, bool backward, bool deterministic) {
  GraphPtr g = new_graph();
  auto Q = g->tensor(tensor("Q", kQ, s, s.H));
  auto K = g->tensor(tensor("K", kK, s, s.Hkv));
  auto V = g->tensor(tensor("V", kV, s, s.Hkv, s.v_ld));
  if (!backward) {
    auto opts = fe::graph::SDPA_attributes()
                    .set_name("sdpa_forward")
                    .set_generate_stats(true)
                    .set_causal_mask(true)
                    .set_attn_scale(scale_of(s));
    auto [O, stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim(bhsd_dim(s, s.H)).set_stride(bhsd_stride(s, s.H));
    stats->set_output(true)
        .set_uid(kStats)
        .set_dim({s.B, s.H, s.T, 1})
        .set_stride({int64_t(s.H) * s.T, s.T, 1, 1})
        .set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto O = g->tensor(tensor("O", kO, s, s.H));
    auto dO = g->tensor(tensor("dO", kdO, s, s.H));
    auto stats = g->tensor(stats_attrs(s));
    auto opts = fe::graph::SDPA_backward_attributes()
                    .set_name("sdpa_backward")
                    .set_causal_mask(true)
                    .set_attn_scale(scale_of(s))
                    .set_deterministic_algorithm(deterministic);
    // With fewer kv heads, cuDNN sums dK and dV over each head group itself.
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, stats, opts);
    dQ->set_output(true).set_uid(kdQ).set_dim(bhsd_dim(s, s.H)).set_stride(bhsd_stride(s, s.H));
    dK->set_output(true).set_uid(kdK).set_dim(bhsd_dim(s, s.Hkv)).set_stride(bhsd_stride(s, s.Hkv));
    dV->set_output(true)
        .set_uid(kdV)
        .set_dim(bhsd_dim(s, s.Hkv))
        .set_stride(bhsd_stride(s, s.Hkv, s.v_ld));
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
  // Key: B, T, H, Hkv, hd, v_ld, backward.
  std::map<std::tuple<int, int, int, int, int, int64_t, bool>, Built> graphs;

  Built& graph(const AttentionShape& s, bool backward);
  void choose(Built& b, const AttentionShape& s, bool backward,
              std::unordered_map<int64_t, void*>& pack, Scratch& scratch);
  void run(const AttentionShape& s, bool backward, std::unordered_map<int64_t, void*>& pack,
           Scratch& scratch);
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

Built& Attention::Impl::graph(const AttentionShape& s, bool backward) {
  const auto key = std::make_tuple(s.B, s.T, s.H, s.Hkv, s.hd, s.v_ld, backward);
  auto it = graphs.find(key);
  if (it != graphs.end()) return it->second;

  const char* what = backward ? "backward" : "forward";
  // Heuristic A names the fast fused (flash) engines. Some shapes (unusual
  // head sizes, deterministic GQA backward) have none, and cuDNN's FALLBACK
  // engine runs them many times slower: a training run that silently lands
  // there is a performance bug, so only --debug accepts it.
  Built b;
  b.g = describe_graph(s, backward, deterministic);
  if (fe::error_t e = build_all(*b.g, handle, fe::HeurMode_t::A); e.is_bad()) {
    if (!allow_fallback)
      throw_error("cuDNN has no fast fused-attention engine for the ", what, " pass (B=", s.B,
                  " T=", s.T, " heads=", s.H, " kv_heads=", s.Hkv, " head_dim=", s.hd,
                  "): ", e.get_message(),
                  "; its FALLBACK engine is much slower, so it runs only under --debug. "
                  "head_dim 64 or 128 with T a multiple of 64 is supported everywhere");
    b.g = describe_graph(s, backward, deterministic);  // a failed build leaves no usable graph
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
void Attention::Impl::choose(Built& b, const AttentionShape& s, bool backward,
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
       << (s.v_ld != int64_t(s.Hkv) * s.hd ? " (strided)" : "") << ": " << name(b.plan)
       << (b.fallback ? " [FALLBACK]" : "") << ", workspace " << b.ws << " B";
  if (ms[size_t(b.plan)] >= 0) {
    line << "; timed " << n << " plans:";
    for (int64_t i = 0; i < n; ++i)
      line << " " << name(i)
           << (ms[size_t(i)] >= 0 ? " " + std::to_string(ms[size_t(i)]) : " failed")
           << (ms[size_t(i)] >= 0 ? " ms" : "");
  }
  engines.push_back(line.str());
}

const std::vector<std::string>& Attention::engines() const {
  return impl_->engines;
}

void Attention::Impl::run(const AttentionShape& s, bool backward,
                          std::unordered_map<int64_t, void*>& pack, Scratch& scratch) {
  Built& b = graph(s, backward);
  if (!b.chosen) choose(b, s, backward, pack, scratch);
  void* workspace = b.ws > 0 ? scratch.get(size_t(b.ws)) : nullptr;
  check_fe(b.g->execute_plan_at_index(handle, pack, workspace, b.plan),
           backward ? "backward" : "forward", s);
}

void Attention::forward(const AttentionShape& s, void* out, float* lse, const void* q,
                        const void* k, const void* v, Scratch& scratch) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, out},
                                             {kStats, lse}};
  impl_->run(s, false, pack, scratch);
}

void Attention::backward(const AttentionShape& s, void* dq, void* dk, void* dv, const void* dout,
                         const void* out, const float* lse, const void* q, const void* k,
                         const void* v, Scratch& scratch) {
  std::unordered_map<int64_t, void*> pack = {{kQ, const_cast<void*>(q)},
                                             {kK, const_cast<void*>(k)},
                                             {kV, const_cast<void*>(v)},
                                             {kO, const_cast<void*>(out)},
                                             {kdO, const_cast<void*>(dout)},
                                             {kStats, const_cast<float*>(lse)},
                                             {kdQ, dq},
                                             {kdK, dk},
                                             {kdV, dv}};
  impl_->run(s, true, pack, scratch);
}

}  // namespace fsdp::cuda
