#include "model/cuda/attention.h"

#include <cudnn_frontend.h>

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
std::vector<int64_t> bhsd_stride(const AttentionShape& s, int heads) {
  return {int64_t(s.T) * heads * s.hd, s.hd, int64_t(heads) * s.hd, 1};
}

fe::graph::Tensor_attributes tensor(const char* name, int64_t uid, const AttentionShape& s,
                                    int heads) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim(bhsd_dim(s, heads))
      .set_stride(bhsd_stride(s, heads));
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
  auto V = g->tensor(tensor("V", kV, s, s.Hkv));
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
    dV->set_output(true).set_uid(kdV).set_dim(bhsd_dim(s, s.Hkv)).set_stride(bhsd_stride(s, s.Hkv));
  }
  return g;
}

}  // namespace

struct Attention::Impl {
  cudnnHandle_t handle = nullptr;
  bool deterministic = false, allow_fallback = false;
  std::vector<std::string> engines;  // one line per built graph, for the log
  // Key: B, T, H, Hkv, hd, backward.
  std::map<std::tuple<int, int, int, int, int, bool>, std::pair<GraphPtr, int64_t>> graphs;

  std::pair<GraphPtr, int64_t>& graph(const AttentionShape& s, bool backward);
  void run(const AttentionShape& s, bool backward, std::unordered_map<int64_t, void*>& pack,
           Scratch& scratch);
};

Attention::Attention(cudaStream_t stream, bool deterministic, bool allow_fallback)
    : impl_(std::make_unique<Impl>()) {
  impl_->deterministic = deterministic;
  impl_->allow_fallback = allow_fallback;
  FSDP_CUDNN_CHECK(cudnnCreate(&impl_->handle));
  FSDP_CUDNN_CHECK(cudnnSetStream(impl_->handle, stream));
}

Attention::~Attention() {
  impl_->graphs.clear();  // plans go before the handle they were built on
  cudnnDestroy(impl_->handle);
}

std::pair<GraphPtr, int64_t>& Attention::Impl::graph(const AttentionShape& s, bool backward) {
  const auto key = std::make_tuple(s.B, s.T, s.H, s.Hkv, s.hd, backward);
  auto it = graphs.find(key);
  if (it != graphs.end()) return it->second;

  const char* what = backward ? "backward" : "forward";
  // Heuristic A names the fast fused (flash) engines. Some shapes (unusual
  // head sizes, deterministic GQA backward) have none, and cuDNN's FALLBACK
  // engine runs them many times slower: a training run that silently lands
  // there is a performance bug, so only --debug accepts it.
  GraphPtr g = describe_graph(s, backward, deterministic);
  bool fallback = false;
  if (fe::error_t e = g->build(handle, {fe::HeurMode_t::A}); e.is_bad()) {
    if (!allow_fallback)
      throw_error("cuDNN has no fast fused-attention engine for the ", what, " pass (B=", s.B,
                  " T=", s.T, " heads=", s.H, " kv_heads=", s.Hkv, " head_dim=", s.hd,
                  "): ", e.get_message(),
                  "; its FALLBACK engine is much slower, so it runs only under --debug. "
                  "head_dim 64 or 128 with T a multiple of 64 is supported everywhere");
    g = describe_graph(s, backward, deterministic);  // a failed build leaves no usable graph
    check_fe(g->build(handle, {fe::HeurMode_t::FALLBACK}), what, s);
    fallback = true;
  }
  int64_t ws = 0;
  check_fe(g->get_workspace_size(ws), what, s);
  std::string plan;
  if (g->get_plan_name(plan).is_bad()) plan = "(unnamed)";
  std::ostringstream line;
  line << "cuDNN SDPA " << what << " B=" << s.B << " T=" << s.T << " heads=" << s.H << "/" << s.Hkv
       << " head_dim=" << s.hd << ": " << plan << (fallback ? " [FALLBACK]" : "") << ", workspace "
       << ws << " B";
  engines.push_back(line.str());
  return graphs.emplace(key, std::make_pair(g, ws)).first->second;
}

const std::vector<std::string>& Attention::engines() const {
  return impl_->engines;
}

void Attention::Impl::run(const AttentionShape& s, bool backward,
                          std::unordered_map<int64_t, void*>& pack, Scratch& scratch) {
  auto& [g, ws] = graph(s, backward);
  void* workspace = ws > 0 ? scratch.get(size_t(ws)) : nullptr;
  check_fe(g->execute(handle, pack, workspace), backward ? "backward" : "forward", s);
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
