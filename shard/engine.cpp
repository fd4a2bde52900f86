#include "shard/engine.h"

#include <algorithm>
#include <cmath>

#include "shard/memory_plan.h"

namespace fsdp {

FsdpEngine::FsdpEngine(Transformer& model, Ops& ops, Communicator& shard, Communicator* replicate,
                       const EngineOptions& options, Communicator* shard_host)
    : model_(model),
      ops_(ops),
      shard_(shard),
      replicate_(replicate && replicate->size() > 1 ? replicate : nullptr),
      shard_host_(shard_host ? *shard_host : shard),
      opt_(options),
      ct_(ops.compute_dtype()),
      rt_(options.reduce_dtype),
      direct_(options.direct_when_unsharded && shard.size() == 1),
      fp8_(options.fp8_gather && model.fp8()),
      trains_(model.use() == ModelUse::train) {
  const auto& specs = model_.units();
  const int U = int(specs.size()), rank = shard_.rank();
  units_.resize(U);

  int fp8_params = 0;
  for (int u = 0; u < U; ++u) {
    Unit& x = units_[u];
    x.layout = make_layout(specs[u], shard_.size(), fp8_);
    const int64_t n = x.layout.shard;

    // Initialise this rank's slice only; padding stays zero.
    std::vector<float> host(size_t(n), 0.0f);
    for (int p = 0; p < int(specs[u].params.size()); ++p) {
      Overlap o = shard_overlap(x.layout, p, rank);
      if (o.count == 0) continue;
      init_param_slice(specs[u].params[p], opt_.seed, o.begin - x.layout.offsets[p], o.count,
                       host.data() + o.local);
    }
    x.master = ops_.alloc(DType::f32, n);
    ops_.to_device(x.master, host.data());
    persistent_bytes_ += 4 * n;
    if (trains_) {  // a forward-only model's engine holds the weights alone
      x.exp_avg = ops_.alloc(DType::f32, n);
      x.exp_avg_sq = ops_.alloc(DType::f32, n);
      x.grad = ops_.alloc(DType::f32, n);
      ops_.zero(x.exp_avg);
      ops_.zero(x.exp_avg_sq);
      ops_.zero(x.grad);
      persistent_bytes_ += 12 * n;
    }
    for (const Segment& g : x.layout.segments) {
      const bool own = gather_dtype(g) != DType::f32;
      x.send.push_back(own ? ops_.alloc(gather_dtype(g), g.shard)
                           : x.master.slice(g.local, g.shard));
      x.owned.push_back(own);
      if (own) persistent_bytes_ += int64_t(x.send.back().bytes());
      if (g.fp8) ops_.zero(x.send.back());  // codes between parameters stay 0
    }
    // A packed run of linears (q|k|v, W1|W3) is one matrix with one scale.
    for (int p = 0; p < int(specs[u].params.size()); ++p) {
      const bool fp8 = x.layout.segments[x.layout.segment_of[p]].fp8;
      x.fp8_index.push_back(!fp8                        ? -1
                            : specs[u].params[p].packed ? x.fp8_index.back()
                                                        : fp8_params++);
    }
  }
  if (fp8_params > 0) {
    amax_ = ops_.alloc(DType::f32, fp8_params);
    scale_inv_ = ops_.alloc(DType::f32, fp8_params * kFp8ScaleSlot);
    persistent_bytes_ += int64_t(amax_.bytes() + scale_inv_.bytes());
  }
  refresh_send_buffers();
  norm_sums_ = ops_.alloc(DType::f32, 2 * U);
  local_sum_ = ops_.alloc(DType::f32, U);

  if (direct_) return;  // no slots: weights and gradients stay in the shards
  std::vector<UnitLayout> layouts;
  for (const auto& x : units_) layouts.push_back(x.layout);
  const SlotPlan plan = plan_slots(layouts, opt_.reshard_after_forward);
  for (int u = 0; u < U; ++u) units_[u].slot = plan.slot_of_unit[u];
  slots_.resize(plan.slot_elems.size());
  std::vector<const UnitLayout*> layout_of_slot(slots_.size());
  for (int u = 0; u < U; ++u) layout_of_slot[size_t(units_[u].slot)] = &units_[u].layout;
  for (size_t s = 0; s < slots_.size(); ++s) {
    const int64_t n = plan.slot_elems[s];
    // Units sharing a slot are alike; a slot no unit uses (the second block
    // slot of a one-block model) holds nothing.
    if (layout_of_slot[s])
      for (size_t g = 0; g < layout_of_slot[s]->segments.size(); ++g) {
        const Segment& seg = layout_of_slot[s]->segments[g];
        slots_[s].full.push_back(ops_.alloc(gather_dtype(seg), plan.segment_elems[s][g]));
        buffer_bytes_ += int64_t(slots_[s].full.back().bytes());
      }
    if (!trains_) continue;
    slots_[s].grad_full = ops_.alloc(rt_, n);
    slots_[s].rs_out = ops_.alloc(rt_, n / shard_.size());
    buffer_bytes_ += int64_t(slots_[s].grad_full.bytes() + slots_[s].rs_out.bytes());
  }
}

FsdpEngine::~FsdpEngine() {
  // After an exception mid-step, prefetched gathers and reduce-scatters may
  // still be writing into slot buffers: let every one finish before anything
  // is freed (other ranks, unwinding the same way, complete them too).
  for (auto& u : units_)
    if (u.gather) u.gather->wait();
  for (auto& s : slots_)
    if (s.reduce) s.reduce->wait();
  for (auto& s : slots_) {
    for (Tensor& t : s.full) ops_.free(t);
    ops_.free(s.grad_full);
    ops_.free(s.rs_out);
  }
  ops_.free(norm_sums_);
  ops_.free(local_sum_);
  if (amax_.numel > 0) {
    ops_.free(amax_);
    ops_.free(scale_inv_);
  }
  for (auto& u : units_) {
    for (size_t g = 0; g < u.send.size(); ++g)
      if (u.owned[g]) ops_.free(u.send[g]);
    ops_.free(u.master);
    ops_.free(u.exp_avg);
    ops_.free(u.exp_avg_sq);
    ops_.free(u.grad);
  }
}

void FsdpEngine::refresh_send_buffers() {
  for (auto& u : units_)
    for (size_t g = 0; g < u.send.size(); ++g) {
      const Segment& seg = u.layout.segments[g];
      if (u.owned[g] && !seg.fp8) ops_.cast(u.send[g], u.master.slice(seg.local, seg.shard));
    }
  if (amax_.numel > 0) refresh_fp8_codes();
}

// Per-tensor scaling of a sharded tensor: every rank holds a slice, so the
// scale comes from the max of the slices' amaxes, all-reduced once for every
// scaled matrix of every unit (a packed run of linears is one). Each rank then
// derives the same scale (the same f32 operations on the same amax) and casts
// its own slice; the gathered codes are what casting the whole f32 matrix
// would give. A unit's matrices have consecutive indices, so each unit is one
// amax_each and one quantize_fp8_amax_each (one launch each on a GPU).
void FsdpEngine::refresh_fp8_codes() {
  const int rank = shard_.rank();
  struct Matrix {
    int param, count, index;
  };
  auto matrices = [](const Unit& u) {
    std::vector<Matrix> m;
    for (int p = 0; p < int(u.fp8_index.size()); ++p) {
      if (u.fp8_index[p] < 0) continue;
      if (!m.empty() && m.back().index == u.fp8_index[p])
        ++m.back().count;
      else
        m.push_back({p, 1, u.fp8_index[p]});
    }
    return m;
  };
  for (auto& u : units_) {
    const std::vector<Matrix> ms = matrices(u);
    std::vector<Tensor> slices;
    for (const Matrix& m : ms) {
      FSDP_CHECK(m.index == ms[0].index + int(slices.size()),
                 "fp8 indices of a unit not consecutive");
      const Overlap o = shard_overlap(u.layout, m.param, rank, m.count);
      slices.push_back(u.master.slice(o.local, o.count));
    }
    if (!ms.empty()) ops_.amax_each(amax_.slice(ms[0].index, int64_t(slices.size())), slices);
  }
  if (shard_.size() > 1) {
    shard_.wait_stream(ops_.stream());
    shard_.all_reduce(amax_.data, size_t(amax_.numel), DType::f32, ReduceOp::max)
        ->wait_on(ops_.stream());
  }
  for (auto& u : units_) {
    std::vector<Ops::Fp8Cast> casts;
    for (const Matrix& m : matrices(u)) {
      const Overlap o = shard_overlap(u.layout, m.param, rank, m.count);
      const int s = u.layout.segment_of[m.param];
      const Segment& g = u.layout.segments[s];
      casts.push_back({u.send[s].slice(o.count ? o.local - g.local : 0, o.count),
                       scale_inv_.slice(m.index * kFp8ScaleSlot, 1),
                       u.master.slice(o.local, o.count), amax_.slice(m.index, 1)});
    }
    ops_.quantize_fp8_amax_each(casts, Fp8::e4m3);
  }
}

void FsdpEngine::note(const std::string& event, int unit) {
  if (opt_.record_trace) trace_.push_back(event + " " + std::to_string(unit));
}

void FsdpEngine::issue_gather(int unit) {
  Unit& u = units_[unit];
  if (direct_) {  // the send copy is the whole unit already
    u.ready = true;
    return;
  }
  if (u.ready || u.gather) return;
  Slot& s = slots_[u.slot];
  FSDP_CHECK(s.weight_owner < 0, "slot of unit ", unit, " still holds unit ", s.weight_owner);
  s.weight_owner = unit;
  note("gather", unit);
  // On a GPU, the slot's previous unit may still have kernels queued, and the
  // send buffer was refreshed on the compute stream: the gather waits for both
  // (for work queued so far, not for the unit about to compute).
  shard_.wait_stream(ops_.stream());
  std::vector<WorkHandle> parts;
  for (size_t g = 0; g < u.send.size(); ++g)
    parts.push_back(shard_.all_gather(u.send[g].data, s.full[g].data,
                                      size_t(u.layout.segments[g].shard),
                                      gather_dtype(u.layout.segments[g])));
  u.gather = join_work(std::move(parts));
  ++in_flight_;
}

void FsdpEngine::wait_gather(int unit) {
  Unit& u = units_[unit];
  if (direct_) u.ready = true;
  if (u.ready) return;
  issue_gather(unit);
  timed_wait(*u.gather);
  u.gather.reset();
  --in_flight_;
  u.ready = true;
}

void FsdpEngine::release(int unit) {
  Unit& u = units_[unit];
  if (u.gather) {
    u.gather->wait();  // never free a buffer a collective still writes
    --in_flight_;
  }
  u.gather.reset();
  u.ready = false;
  if (direct_) return;
  slots_[u.slot].weight_owner = -1;
  note("release", unit);
}

void FsdpEngine::progress() {
  if (!opt_.progress_between_ops) return;
  if (in_flight_ > replicas_in_flight_) shard_.progress();
  if (replicas_in_flight_ > 0) replicate_->progress();
}

int64_t FsdpEngine::span(int unit, int param, int count) const {
  const UnitLayout& l = units_[unit].layout;
  FSDP_CHECK(count >= 1 && param + count <= int(l.offsets.size()) &&
                 l.segment_of[param] == l.segment_of[param + count - 1],
             "parameters ", param, "+", count, " of unit ", unit, " span segments");
  return model_.units()[size_t(unit)].span_numel(param, count);  // checks they are packed
}

Tensor FsdpEngine::weight(int unit, int param, int count) {
  progress();
  const Unit& u = units_[unit];
  FSDP_CHECK(u.ready, "unit ", unit, " used while not gathered");
  const int g = u.layout.segment_of[param];
  const Segment& seg = u.layout.segments[g];
  FSDP_CHECK(!seg.fp8, "parameter ", param, " of unit ", unit, " is gathered as FP8 codes");
  const Tensor& full = direct_ ? u.send[g] : slots_[u.slot].full[g];
  return full.slice(u.layout.offsets[param] - seg.begin, span(unit, param, count));
}

Fp8Tensor FsdpEngine::weight_fp8(int unit, int param, int count) {
  progress();
  const Unit& u = units_[unit];
  FSDP_CHECK(u.ready, "unit ", unit, " used while not gathered");
  const int i = u.fp8_index[param];
  if (i < 0) return {};
  const int g = u.layout.segment_of[param];
  const Tensor& full = direct_ ? u.send[g] : slots_[u.slot].full[g];
  return {
      full.slice(u.layout.offsets[param] - u.layout.segments[g].begin, span(unit, param, count)),
      scale_inv_.slice(i * kFp8ScaleSlot, 1), Fp8::e4m3};
}

Tensor FsdpEngine::grad(int unit, int param, int count) {
  progress();
  const Unit& u = units_[unit];
  FSDP_CHECK(u.grad_active, "gradient of unit ", unit, " used outside its backward");
  // Direct: the backward's += lands in the f32 shard, which the optimizer
  // step clears, so micro-batches accumulate there too.
  const Tensor& full = direct_ ? u.grad : slots_[u.slot].grad_full;
  return full.slice(u.layout.offsets[param], span(unit, param, count));
}

void FsdpEngine::begin_grads(int unit) {
  Unit& u = units_[unit];
  if (u.grad_active) return;
  if (direct_) {
    u.grad_active = true;
    return;
  }
  Slot& s = slots_[u.slot];
  finish_reduce(s);  // the slot's previous gradients must have left before we overwrite them
  s.grad_owner = unit;
  ops_.zero(s.grad_full.slice(0, u.layout.padded));
  u.grad_active = true;
}

void FsdpEngine::issue_reduce(int unit) {
  Unit& u = units_[unit];
  if (direct_) {  // the shard is the unit: only replicas have anything to sum
    u.grad_active = false;
    if (last_of_step_ && replicate_) issue_replica_reduce(unit);
    return;
  }
  Slot& s = slots_[u.slot];
  note("reduce", unit);
  shard_.wait_stream(ops_.stream());  // the gradients were just computed there
  // Queued after that wait, so the reduce-scatter does not wait for it.
  take_local_sum(unit, s.grad_full.slice(0, u.layout.padded));
  ++in_flight_;
  // The first micro-batch of a step finds the shard's gradient zero (the
  // update and discard_gradients leave it so), so an f32 reduce-scatter can
  // write it directly: no accumulate pass over the shard afterwards.
  s.into_shard = micro_batch_ == 0 && rt_ == DType::f32 && u.grad.dtype == DType::f32;
  const Tensor& into = s.into_shard ? u.grad : s.rs_out;
  std::vector<WorkHandle> parts;
  for (const Segment& g : u.layout.segments)
    parts.push_back(shard_.reduce_scatter(s.grad_full.slice(g.begin, g.padded).data,
                                          into.slice(g.local, g.shard).data, size_t(g.shard), rt_,
                                          ReduceOp::sum));
  s.reduce = join_work(std::move(parts));
  u.grad_active = false;
}

// Marks on the compute stream either side of the dependency: on a GPU the
// span is the time compute stood still waiting for the collective (the wait
// itself is an event, not a host block); on the CPU it is the host's wait.
void FsdpEngine::timed_wait(Work& w) {
  const int before = ops_.mark();
  w.wait_on(ops_.stream());
  wait_spans_.emplace_back(before, ops_.mark());
}

double FsdpEngine::take_comm_wait_seconds() {
  double s = 0;
  for (auto [a, b] : wait_spans_) s += ops_.seconds(a, b);
  wait_spans_.clear();
  return s;
}

void FsdpEngine::finish_reduce(Slot& s) {
  if (!s.reduce) return;
  timed_wait(*s.reduce);
  s.reduce.reset();
  --in_flight_;
  const int unit = s.grad_owner;
  Unit& u = units_[unit];
  if (!s.into_shard) ops_.accumulate(u.grad, s.rs_out.slice(0, u.layout.shard), 1.0f);
  s.into_shard = false;
  s.grad_owner = -1;
  if (last_of_step_ && replicate_) issue_replica_reduce(unit);
}

void FsdpEngine::issue_replica_reduce(int unit) {
  Unit& u = units_[unit];
  if (u.replica_reduce) return;
  note("replica", unit);
  // With one shard per replica its gradient is all this rank's, until now.
  if (direct_) take_local_sum(unit, u.grad);
  replicate_->wait_stream(ops_.stream());  // after the gradients just queued there
  u.replica_reduce =
      replicate_->all_reduce(u.grad.data, size_t(u.layout.shard), DType::f32, ReduceOp::sum);
  ++in_flight_;
  ++replicas_in_flight_;
}

// GradientNorms::local: summed over the step's micro-batches (the first
// overwrites), except in a direct shard, which accumulates its micro-batches
// itself and is read once. Gradients reduced in bf16 are left out.
void FsdpEngine::take_local_sum(int unit, Tensor local) {
  if (local.dtype != DType::f32) return;
  Tensor into = norm_sums_.slice(num_units() + unit, 1);
  if (direct_ || micro_batch_ == 0) return ops_.sum_squares_each(into, {local});
  ops_.sum_squares_each(local_sum_.slice(unit, 1), {local});
  ops_.accumulate(into, local_sum_.slice(unit, 1), 1.0f);
}

void FsdpEngine::forward_only() {
  const int U = num_units();
  for (int u = 0; u < U; ++u) {
    for (int r : model_.units_read_by(u)) wait_gather(r);
    if (u + 1 < U)
      for (int r : model_.units_read_by(u + 1)) issue_gather(r);
    note("forward", u);
    model_.forward(u, *this, false);
    check_finite(u, false);
    if (opt_.reshard_after_forward && u > 0 && u < U - 1) release(u);
  }
  if (opt_.reshard_after_forward) {
    release(0);
    release(U - 1);
  }
}

void FsdpEngine::require_training(const char* what) const {
  FSDP_CHECK(trains_, what, " on an engine whose model is forward-only (ModelUse::forward_only)");
}

void FsdpEngine::forward_backward(bool last_of_step) {
  require_training("forward_backward");
  last_of_step_ = last_of_step;
  const int U = num_units();
  for (int u = 0; u < U; ++u) {
    for (int r : model_.units_read_by(u)) wait_gather(r);
    if (u + 1 < U)
      for (int r : model_.units_read_by(u + 1)) issue_gather(r);
    // The head's training forward also takes its gradients (Transformer):
    // its backward follows at once, so the buffers start one unit early.
    if (u == U - 1)
      for (int r : model_.units_read_by(u)) begin_grads(r);
    note("forward", u);
    model_.forward(u, *this, true);
    check_finite(u, false);
    // The embedding (read again by a tied head) and the head (whose backward
    // comes next) stay; blocks are re-gathered for backward.
    if (opt_.reshard_after_forward && u > 0 && u < U - 1) release(u);
  }
  for (int u = U - 1; u >= 0; --u) {
    for (int r : model_.units_read_by(u)) wait_gather(r);
    if (u > 0)
      for (int r : model_.units_read_by(u - 1)) issue_gather(r);
    for (int r : model_.units_read_by(u)) begin_grads(r);
    note("backward", u);
    model_.backward(u, *this);
    check_finite(u, true);
    // A unit's gradients are complete once no unit still to run writes them.
    // Unit 0 (read by the tied head) is the last to run, so this holds.
    issue_reduce(u);
    release(u);
    // A reduce-scatter two units back has had two backwards to land. Blocks
    // share slots, so reusing a slot already took theirs; the head has its
    // own, and would otherwise wait for the end (with its all-reduce across
    // replicas, on the last micro-batch).
    if (!direct_ && u + 2 < U) {
      Slot& earlier = slots_[units_[u + 2].slot];
      if (earlier.grad_owner == u + 2) finish_reduce(earlier);
    }
  }
  for (auto& s : slots_) finish_reduce(s);
  last_of_step_ = false;
  ++micro_batch_;
}

void FsdpEngine::check_finite(int unit, bool backward) {
  if (!opt_.check_finite || all_finite(ops_, model_.output_of(unit, backward))) return;
  throw_error("--debug: the ", backward ? "backward" : "forward", " of unit '",
              model_.units()[unit].name, "' produced NaN or Inf at step ", steps_ + 1,
              ", micro-batch ", micro_batch_,
              backward ? " (in the gradient it passes down)" : " (in its output)",
              "; lower --lr, check the data, or look at that unit's inputs");
}

// Waits for the all-reduces across replicas, first issuing those still
// missing when `issue_missing`; afterwards each replica holds the same,
// summed gradient shards.
void FsdpEngine::finish_replica_reduces(bool issue_missing) {
  if (!replicate_) return;
  if (issue_missing)
    for (int u = 0; u < num_units(); ++u) issue_replica_reduce(u);
  for (auto& u : units_) {
    if (!u.replica_reduce) continue;
    timed_wait(*u.replica_reduce);
    u.replica_reduce.reset();
    --in_flight_;
    --replicas_in_flight_;
  }
}

void FsdpEngine::discard_gradients() {
  require_training("discard_gradients");
  for (auto& s : slots_) finish_reduce(s);
  finish_replica_reduces(false);  // never zero a buffer a collective still reads
  for (auto& u : units_) ops_.zero(u.grad);
  micro_batch_ = 0;
  wait_spans_.clear();
}

bool GradientNorms::finite() const {
  return std::isfinite(total);
}

std::vector<std::string> GradientNorms::nonfinite_units(const Transformer& model) const {
  std::vector<std::string> names;
  for (size_t i = 0; i < unit.size(); ++i)
    if (!std::isfinite(unit[i])) names.push_back(model.units()[i].name);
  return names;
}

GradientNorms FsdpEngine::measure_gradients() {
  require_training("measure_gradients");
  finish_replica_reduces(true);
  // Every replica now holds the same gradient shards, so the norm needs only
  // the shard group's sum. One value per unit (a few dozen floats, one
  // collective) names the units behind a non-finite norm for free.
  const int U = num_units();
  std::vector<Tensor> grads;
  for (const Unit& u : units_) grads.push_back(u.grad);
  ops_.sum_squares_each(norm_sums_.slice(0, U), grads);
  std::vector<float> sums(2 * size_t(U));
  ops_.to_host(sums.data(), norm_sums_);  // the step's one wait for the device
  GradientNorms n;
  // A lone shard (no peers, no replicas) computed all of its gradient.
  if (direct_ && !replicate_) std::copy_n(sums.begin(), U, sums.begin() + U);
  if (direct_ || rt_ == DType::f32) n.local.assign(sums.begin() + U, sums.end());
  sums.resize(U);
  shard_host_.all_reduce(sums.data(), sums.size(), DType::f32, ReduceOp::sum)->wait();
  double total = 0;
  for (float s : sums) {
    n.unit.push_back(std::sqrt(double(s)));
    total += double(s);
  }
  n.total = std::sqrt(total);
  return n;
}

void FsdpEngine::apply_update(const OptimizerConfig& oc, float lr, const GradientNorms& norms) {
  require_training("apply_update");
  const AdamWConfig& c = oc.adamw;
  const double norm = norms.total;
  FSDP_CHECK(std::isfinite(norm), "apply_update with a non-finite gradient norm ", norm);
  const float scale =
      (c.grad_clip > 0 && norm > c.grad_clip) ? float(c.grad_clip / (norm + 1e-6)) : 1.0f;

  ++steps_;
  micro_batch_ = 0;
  const int rank = shard_.rank();
  const auto& specs = model_.units();
  const AdamWHyper h{lr, c.beta1, c.beta2, c.eps, scale, steps_};
  const bool muon = oc.kind == OptimizerKind::muon;
  if (muon && !muon_) {
    std::vector<UnitLayout> layouts;
    for (const Unit& u : units_) layouts.push_back(u.layout);
    muon_ = std::make_unique<MuonStep>(ops_, shard_, specs, layouts, oc.muon);
    buffer_bytes_ += muon_->buffer_bytes();
  }
  std::vector<AdamWSpan> spans;
  for (int ui = 0; ui < num_units(); ++ui) {
    Unit& u = units_[ui];
    // Muon's matrices first: their gradients become its updates, which
    // AdamW's pass below leaves alone and then clears with the rest.
    if (muon)
      muon_->update_unit(ui, u.layout, u.master, u.grad, u.exp_avg, u.exp_avg_sq, lr,
                         c.weight_decay, scale);
    spans.clear();
    for (int p = 0; p < int(specs[ui].params.size()); ++p) {
      if (muon && muon_->is_muon(ui, p)) continue;
      Overlap o = shard_overlap(u.layout, p, rank);
      if (o.count == 0) continue;
      const float wd = specs[ui].params[p].decay() ? c.weight_decay : 0.0f;
      spans.push_back({o.local, o.count, wd});
    }
    // in shard order (segments reorder parameters)
    std::sort(spans.begin(), spans.end(),
              [](const AdamWSpan& a, const AdamWSpan& b) { return a.begin < b.begin; });
    // One pass per unit: the update, the all-gather's copy, cleared gradients.
    // A unit in segments gets its compute-dtype copies after; FP8 codes need
    // every rank's updated amax first.
    const bool whole = u.send.size() == 1 && !u.layout.segments[0].fp8;
    ops_.adamw(u.master, u.grad, u.exp_avg, u.exp_avg_sq,
               whole && u.owned[0] ? u.send[0] : Tensor{}, spans, h, true);
    for (size_t g = 0; g < u.send.size() && !whole; ++g) {
      const Segment& seg = u.layout.segments[g];
      if (u.owned[g] && !seg.fp8) ops_.cast(u.send[g], u.master.slice(seg.local, seg.shard));
    }
  }
  if (amax_.numel > 0) refresh_fp8_codes();
}

double FsdpEngine::step(const OptimizerConfig& c, float lr) {
  const GradientNorms n = measure_gradients();
  if (!n.finite())
    throw_error("the gradient norm is ", n.total, " at step ", steps_ + 1,
                "; the step was not applied");
  apply_update(c, lr, n);
  return n.total;
}

bool FsdpEngine::masters_finite() {
  // A sum of squares is finite exactly when every element is (or the
  // weights are so large that it overflows, which is no healthier).
  double local = 0;
  for (auto& u : units_) local += ops_.sum_squares(u.master);
  float bad = std::isfinite(local) ? 0.0f : 1.0f;
  shard_host_.all_reduce(&bad, 1, DType::f32, ReduceOp::max)->wait();
  return bad == 0.0f;
}

}  // namespace fsdp
