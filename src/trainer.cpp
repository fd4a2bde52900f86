#include "src/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "comm/watchdog.h"
#include "common/test_hooks.h"
#include "shard/memory_plan.h"
#include "src/backend.h"
#include "src/checkpointing.h"
#include "src/lr_schedule.h"
#include "src/memory_check.h"
#include "src/sampling.h"
#include "src/stop_signal.h"
#include "src/time_budget.h"

namespace fsdp {

namespace {

// `train` is the training data when opening --val-data: a validation loss
// over token ids of another tokenizer would be a number that means nothing.
TokenStream open_checked(const std::string& spec, const char* flag, const Options& o,
                         const TokenStream* train = nullptr) {
  TokenStream d = TokenStream::open(spec, flag, MPI_COMM_WORLD);
  if (train && d.vocab_size() != train->vocab_size())
    throw_error(flag, ": ", d.describe(), " has vocab_size ", d.vocab_size(), " but ",
                train->flag(), " ", train->describe(), " has vocab_size ", train->vocab_size(),
                "; validate on data made with the training data's tokenizer");
  if (train && !same_tokenizer(d.tokenizer_id(), train->tokenizer_id()))
    throw_error(flag, ": ", d.describe(), " has tokenizer ", d.tokenizer_id().describe(), " but ",
                train->flag(), " ", train->describe(), " has tokenizer ",
                train->tokenizer_id().describe(),
                ": not the same tokenizer; make the validation data with the training "
                "data's tokenizer file (prepare_data.py --tokenizer hf:PREFIX_tokenizer.json)");
  if (d.vocab_size() > o.model.vocab_size)
    throw_error(flag, ": ", d.describe(), " has vocab_size ", d.vocab_size(), " but the model has ",
                o.model.vocab_size, "; pass --vocab-size ", d.vocab_size(), " or a larger preset");
  // Validation reads windows of its own context (--eval-seq-len).
  if (train && o.eval.seq_len > 0)
    d.require_min_tokens(int64_t(o.eval.seq_len) + 1,
                         "one sequence of --eval-seq-len " + std::to_string(o.eval.seq_len));
  else
    d.require_min_tokens(int64_t(o.data.seq_len) + 1,
                         "one sequence of --seq-len " + std::to_string(o.data.seq_len));
  return d;
}

double mib(int64_t bytes) {
  return double(bytes) / (1 << 20);
}

// Whether `done` steps end a period of `n` steps (0: no period).
bool every(int n, int done) {
  return n > 0 && done % n == 0;
}

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

Trainer::Trainer(const Options& options, const WorldInfo& world)
    : o_(options),
      world_(world),
      lead_(world.rank == 0),
      shard_group_size_(
          resolve_shard_group_size(o_.compute.shard_group_size, world, &shard_group_why_)),
      // --eval-only may leave out the training data: the validation file
      // then stands in where a stream is needed for checks, never read.
      train_data_(o_.data.train_data.empty()
                      ? open_checked(o_.data.val_data, "--val-data", o_)
                      : open_checked(o_.data.train_data, "--train-data", o_)),
      spikes_(o_.divergence) {
  // Collective steps (data opening, process groups, resume) agree on errors
  // themselves; steps that can fail on some ranks only go through
  // all_or_none, so no rank is left waiting in a collective.
  const MPI_Comm W = MPI_COMM_WORLD;
  if (!o_.data.val_data.empty())
    val_data_.emplace(open_checked(o_.data.val_data, "--val-data", o_, &train_data_));
  Device device = Device::cpu;
  all_or_none(W, [&] {
    device = resolve_device(o_);  // a configuration error before any file is created
    test_hooks::stall_spec();     // a malformed FSDP_TEST_STALL, as early
    if (lead_) metrics_.open(o_.run.metrics);
  });
  // Evaluation only reads a checkpoint (saves are renamed into place whole),
  // so it may run beside the training run that owns the directory.
  if (!o_.eval.only) checkpoint_lock_ = claim_checkpoint_dir(o_, W);
  // A wrong --init-from file (missing, damaged, another model) is said now,
  // not after the model is built on the GPU. Under --resume the file is used
  // only where no checkpoint is found, so it is checked then (a rerun that
  // continues its own checkpoint does not need it any more).
  if (!o_.checkpoint.init_from.empty() && o_.checkpoint.resume.empty()) {
    try {
      read_checkpoint_meta(o_.checkpoint.init_from, W, &o_.model);
    } catch (const Error& e) {
      throw Error(std::string("--init-from: ") + e.what());  // every rank caught the same
    }
  }

  // --prompt in the data's own tokenizer: text it cannot encode, or too
  // long for --seq-len, is said before the GPU is touched.
  if (o_.sample.count > 0)
    all_or_none(W, [&] {
      prompts_ =
          sample_prompts(o_.sample.prompts, val_data_ ? *val_data_ : train_data_, o_.data.seq_len);
    });

  // Everything the user can get wrong is checked above; now build.
  all_or_none(W, [&] { ops_ = make_ops(device, o_, world_); });
  if (o_.run.profile_ops) profiler_ = std::make_unique<OpProfiler>(*ops_);
  // Tests only: over NCCL the hook sits in its set-up (comm/nccl_communicator.cpp).
  const bool nccl = device == Device::cuda && o_.compute.device_comm != DeviceComm::staged;
  if (!nccl) test_hooks::stall_at_init(world_.rank);
  groups_ = make_process_groups(Backend::mpi, shard_group_size_);
  // The engine's collectives run on device buffers over NCCL on a GPU (or
  // staged, --device-comm); the host groups above carry the scalars (losses,
  // norms, flags) either way.
  ProcessGroups* engine_groups = &groups_;
  if (device == Device::cuda || o_.compute.device_comm == DeviceComm::staged) {
    device_groups_ = make_engine_groups(device, o_, shard_group_size_);
    engine_groups = &*device_groups_;
  }
  if (o_.data.batch_size == 0) {
    o_.data.batch_size = auto_batch_size_everywhere();
    all_or_none(W, [&] { check_eval_micro_batch(o_, o_.data.batch_size); });
  }
  const int batch = o_.data.batch_size;
  // The plan against free memory before build() allocates anything it sizes.
  all_or_none(W, [&] { check_memory_fits(memory_plan(batch), *ops_, memory_settings(batch)); });
  all_or_none(W, [&] { build(*engine_groups); });
  checkpoints_.emplace(o_, CheckpointContext{o_.model, *engine_, *ops_, W}, loader_.get(), lead_);
  {
    // Collective parallel-HDF5 reads: a rank stuck here holds up all of them.
    WatchScope watch("checkpoint load (--resume, --init-from)");
    pos_ = checkpoints_->resume();
  }
  spikes_.restore(pos_.loss_history);
  // The step count; under a time budget the checkpoint's fixed count, or
  // --steps where it caps the run within the timed steps, or 0 until the
  // budget fixes it (run()).
  steps_ = o_.run.steps;
  if (o_.run.time_budget.seconds > 0) {
    used_before_s_ = pos_.budget_used_s;
    if (pos_.budget_steps > 0 && lead_ && !o_.eval.only)
      std::printf(
          "fsdptrain: --time-budget: the step count %lld was fixed by the checkpoint's run "
          "(%.1f s used then); it stays, so the schedule goes on unchanged\n",
          (long long)pos_.budget_steps, used_before_s_);
    pos_.budget_steps = budget_steps_at_start(pos_.budget_steps, o_.run.steps, o_.schedule);
    steps_ = int(pos_.budget_steps);
  }
  // Lines of another run would read as this one's (plot_metrics: "replaced on resume").
  if (metrics_.begin(!pos_.resumed_from.empty() || o_.eval.only))
    std::printf(
        "fsdptrain: --metrics '%s' holds an earlier run's lines; this fresh run starts "
        "it anew (a resumed run appends)\n",
        o_.run.metrics.c_str());
  const size_t n = size_t(batch) * o_.data.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
  if (o_.sample.count > 0)
    all_or_none(W, [&] {
      if (!lead_) return;
      const TokenStream& s = val_data_ ? *val_data_ : train_data_;
      decoder_ =
          TokenDecoder::open(s.source(0).file, o_.model.vocab_size, s.tokenizer(), &decoder_note_);
    });
  if (lead_) print_memory_plan();
}

// The rank-local part of set-up: memory on the device, the reader thread.
void Trainer::build(ProcessGroups& engine_groups) {
  const DataOptions& d = o_.data;
  model_ = std::make_unique<Transformer>(o_.model, *ops_, d.batch_size, d.seq_len,
                                         o_.compute.recompute, o_.compute.fp8(), 0, model_use());
  EngineOptions eo = o_.engine;
  eo.seed = o_.run.seed;
  eo.check_finite = o_.run.debug;
  engine_ = std::make_unique<FsdpEngine>(*model_, *ops_, *engine_groups.shard,
                                         engine_groups.replicate.get(), eo, groups_.shard.get());
  // Every rank is a data-parallel rank: shard and replicate groups both split data.
  if (!o_.eval.only)
    loader_ = std::make_unique<BatchLoader>(train_data_, d.seq_len, d.batch_size, d.grad_accum,
                                            world_.rank, world_.size, o_.run.seed);
  if (val_data_) {
    val_batches_ = std::make_unique<ValBatches>(*val_data_, o_.eval.context(d.seq_len),
                                                o_.eval.micro_batch(d.batch_size, d.seq_len),
                                                world_.rank, world_.size);
    const int64_t pass = val_batches_->batches_per_pass();
    if (lead_ && o_.eval.batches > 0 && validates_whole_split())
      std::printf(
          "fsdptrain: --eval-batches %d reaches past the validation split (%lld windows, %lld "
          "batch(es) a rank): validating on the whole split, each window once\n",
          o_.eval.batches, (long long)val_batches_->windows(), (long long)pass);
  }
}

// --batch-size 0: the largest micro-batch the plan fits on every rank.
int Trainer::auto_batch_size_everywhere() {
  float fits = 0;
  all_or_none(MPI_COMM_WORLD, [&] {
    fits = float(auto_batch_size([&](int b) { return memory_plan(b); }, *ops_, memory_settings(1)));
  });
  fits = -fits;  // the smallest over ranks, as a max
  groups_.world->all_reduce(&fits, 1, DType::f32, ReduceOp::max)->wait();
  // Not even one sequence: batch 1, whose memory check says why.
  const int batch = std::max(1, int(-fits));
  if (lead_ && fits < 0)
    std::printf(
        "fsdptrain: --batch-size 0 (auto): %d sequences per rank per micro-batch, the "
        "largest whose memory plan fits on every rank (at most %d)\n",
        batch, kMaxAutoBatch);
  return batch;
}

MemoryPlan Trainer::memory_plan(int batch) const {
  return plan_memory(o_.model, {.shard_size = groups_.shard->size(),
                                .compute = ops_->compute_dtype(),
                                .batch = batch,
                                .seq_len = o_.data.seq_len,
                                .recompute = o_.compute.recompute,
                                .fp8 = o_.compute.fp8(),
                                .engine = o_.engine,
                                .optimizer = o_.optimizer.kind,
                                .use = model_use()});
}

// --eval-only builds what evaluation needs: the weights and a forward's
// activations, no gradients, optimizer state or backward buffers.
ModelUse Trainer::model_use() const {
  return o_.eval.only ? ModelUse::forward_only : ModelUse::train;
}

MemorySettings Trainer::memory_settings(int batch) const {
  return {world_.local_size,    groups_.shard->size(),         world_.size, batch,
          o_.compute.recompute, model_use() == ModelUse::train};
}

Trainer::~Trainer() = default;

void Trainer::print_memory_plan() const {
  const ModelConfig& m = o_.model;
  const int n = groups_.shard->size();
  const MemoryPlan p = memory_plan(o_.data.batch_size);
  const std::string fp8_note =
      !o_.compute.fp8()
          ? ""
          : std::string(" with FP8 block GEMMs (e4m3") +
                (ops_->capabilities().native_fp8 ? "" : ", emulated") +
                "; their weights gathered as " +
                (o_.engine.fp8_gather ? "e4m3" : dtype_name(ops_->compute_dtype())) + ")";
  // A preset whose fields a --config (an import's OUT.ini) or flags changed is
  // not that preset any more: say so, rather than announce an imported 135M
  // model as "tiny".
  const std::string name =
      m == model_preset(m.name) ? m.name : "custom (the " + m.name + " preset, fields changed)";
  std::printf(
      "fsdptrain: model %s, %.2fM parameters, %d layers, d_model %d, %d/%d heads%s\n", name.c_str(),
      m.num_params() / 1e6, m.n_layer, m.d_model, m.n_head, m.n_kv_head,
      m.head_dim() * m.n_head == m.d_model ? "" : (" of " + std::to_string(m.head_dim())).c_str());
  std::printf(
      "fsdptrain: %d rank(s) on %d node(s), shard group %d (%s), replicas %d, device %s, %s%s, "
      "collectives %s\n",
      world_.size, world_.num_nodes, n, shard_group_why_.c_str(), world_.size / n, ops_->name(),
      dtype_name(ops_->compute_dtype()), fp8_note.c_str(),
      device_groups_ ? device_groups_->shard->backend_name() : groups_.shard->backend_name());
  char muon[48] = "";  // Muon's exchange buffers, only when it runs
  if (p.optimizer_buffers > 0)
    std::snprintf(muon, sizeof muon, " + Muon buffers %.1f", mib(p.optimizer_buffers));
  if (o_.eval.only)
    std::printf(
        "fsdptrain: per-rank memory plan (MiB), evaluation only: params %.1f + send copy %.1f "
        "(both 1/%d) | gather buffers %.1f | activations of a forward %.1f | total %.1f\n",
        mib(p.master), mib(p.send_copy), n, mib(p.gather_buffers), mib(p.activations),
        mib(p.total()));
  else
    std::printf(
        "fsdptrain: per-rank memory plan (MiB): params %.1f + grads %.1f + AdamW %.1f "
        "+ send copy %.1f (all 1/%d) | gather buffers %.1f + grad buffers %.1f%s | "
        "activations %.1f | total %.1f\n",
        mib(p.master), mib(p.grads), mib(p.moments), mib(p.send_copy), n, mib(p.gather_buffers),
        mib(p.grad_buffers), muon, mib(p.activations), mib(p.total()));
  const std::string steps =
      steps_ > 0 ? std::to_string(steps_) + " steps"
                 : "the steps fixed by --time-budget " + format_value(o_.run.time_budget) +
                       " after timing the first " + std::to_string(budget_probe_steps(o_.schedule));
  if (loader_)
    std::printf(
        "fsdptrain: global batch %lld sequences x %d tokens; %s; data %s "
        "(%lld tokens, %lld windows per epoch)\n",
        (long long)loader_->sequences_per_step(), o_.data.seq_len, steps.c_str(),
        train_data_.describe().c_str(), (long long)train_data_.size(),
        (long long)loader_->sampler().windows_per_epoch());
  else
    std::printf("fsdptrain: evaluation only: %s (%lld tokens, %lld windows of %d)\n",
                val_data_->describe().c_str(), (long long)val_data_->size(),
                (long long)val_batches_->windows(), o_.eval.context(o_.data.seq_len) + 1);
  if (val_batches_ && o_.eval.seq_len > 0)
    std::printf(
        "fsdptrain: validation at context %d (--eval-seq-len), %d sequences per "
        "micro-batch\n",
        o_.eval.seq_len, o_.eval.micro_batch(o_.data.batch_size, o_.data.seq_len));
  std::fflush(stdout);
}

std::pair<double, double> Trainer::global_sum(double a, double b) {
  float v[2] = {float(a), float(b)};
  groups_.world->all_reduce(v, 2, DType::f32, ReduceOp::sum)->wait();
  return {v[0], v[1]};
}

StepLoss Trainer::train_step(int step) {
  // Gradients are averaged over the global batch exactly once, here: every
  // token's loss is scaled by 1 / (tokens in the global batch).
  const double global_tokens = double(o_.data.tokens_per_step(world_.size));
  const int accum = o_.data.grad_accum;
  // Tests only (common/test_hooks.h): all 1 unless an FSDP_TEST_* fault is
  // asked for at this step.
  const test_hooks::StepFault fault =
      test_faults_.begin_step(step + 1, loader_->state().consumed, loader_->sequences_per_step());
  const float grad_scale = float(1.0 / global_tokens) * fault.grad_scale;
  double loss_sum = 0, count = 0;
  for (int m = 0; m < accum; ++m) {
    loader_->next_micro_batch(m, inputs_.data(), targets_.data());
    model_->set_batch(inputs_.data(), targets_.data(), grad_scale);
    engine_->forward_backward(m + 1 == accum);
    loss_sum += model_->loss_sum();
    count += double(model_->loss_count());
  }
  loader_->end_step();
  loss_sum *= fault.local_loss_scale;
  auto [s, c] = global_sum(loss_sum, count);
  s *= fault.global_loss_scale;
  return {s / c, loss_sum};
}

// Model FLOPs utilisation (docs/ARCHITECTURE.md, "FLOPs and MFU"): useful FLOPs
// per token (recomputation excluded) times tokens/s over the dense peak of all
// GPUs; none on the CPU.
double Trainer::mfu(double tokens_per_s) const {
  const double peak = ops_->capabilities().peak_flops;
  if (peak <= 0) return std::nan("");
  return tokens_per_s * o_.model.flops_per_token(o_.data.seq_len) / (peak * world_.size);
}

void Trainer::log_step(int step, double loss, float lr, double norm, double seconds) {
  const double tok_s = double(o_.data.tokens_per_step(world_.size)) / seconds;
  if (step > 0) {  // the first step pays one-time costs; leave it out of the ETA
    step_seconds_total_ += seconds;
    ++steps_timed_;
  }
  const double avg = steps_timed_ ? step_seconds_total_ / steps_timed_ : seconds;
  // The highest per-rank peak: the number that decides whether a run fits.
  float peak[2] = {float(peak_rss_bytes()), float(ops_->peak_device_bytes())};
  groups_.world->all_reduce(peak, 2, DType::f32, ReduceOp::max)->wait();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  metrics_.write({{"step", std::to_string(step + 1)},
                  {"loss", json_number(loss)},
                  {"lr", json_number(lr)},
                  {"grad_norm", json_number(norm)},
                  {"tokens_seen", std::to_string(pos_.tokens_seen)},
                  {"tokens_per_s", json_number(tok_s)},
                  {"data_wait_s", json_number(loader_->last_step_wait_seconds())},
                  {"comm_wait_s", json_number(engine_->take_comm_wait_seconds())},
                  {"mfu", json_number(mfu(tok_s))},
                  {"peak_rss_bytes_max_rank", json_number(peak[0])},
                  {"peak_device_bytes_max_rank", json_number(peak[1])},
                  {"elapsed_s", json_number(elapsed)},
                  {"train_s", json_number(train_seconds_)}});
  const int steps = steps_;
  if (lead_ && (every(o_.run.log_every, step + 1) || step + 1 == steps)) {
    std::printf("step %5d/%s | loss %.4f | lr %.2e | norm %.3f | %s tok/s | ETA %s\n", step + 1,
                steps_text().c_str(), loss, lr, norm, format_rate(tok_s).c_str(),
                steps > 0 ? format_duration(avg * (steps - step - 1)).c_str() : "?");
    std::fflush(stdout);
  }
}

// All ranks stop at the same step: the signal may reach them at different
// times. Likewise a background save ends on each rank in its own time; it is
// finished (and its outcome, perhaps an error, acted on) at the first step
// boundary where it has ended on every rank, found by the same all-reduce.
bool Trainer::agree_at_step_boundary() {
  float flags[2] = {stop_signal_name() ? 1.0f : 0.0f,
                    checkpoints_->background_save_done() ? 0.0f : 1.0f};
  groups_.world->all_reduce(flags, 2, DType::f32, ReduceOp::max)->wait();
  if (flags[1] == 0) finish_background_save();
  return flags[0] > 0;
}

// One forward+backward on the shapes of a real step, gradients then dropped:
// cuDNN graphs, cuBLASLt plans and NCCL connections are built here, so a
// configuration the GPU libraries cannot run stops before step 1, and step 1's
// time is a step's. Tokens 0 are valid for any vocabulary. On the CPU it
// costs one micro-batch and exercises the same path.
//
// A run whose --time-budget count is still to be fixed repeats the pass
// until the device has worked for budget_settle_seconds after the first one
// (src/time_budget.h), so that the steps it times run at the clock the rest
// will. The ranks agree after each pass whether to go on: each pass gathers
// weights from all of them.
void Trainer::warm_up() {
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds_since = [](auto t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  std::fill(inputs_.begin(), inputs_.end(), 0);
  std::fill(targets_.begin(), targets_.end(), 0);
  model_->set_batch(inputs_.data(), targets_.data(), 1.0f / float(inputs_.size()));
  const double budget_s = o_.run.time_budget.seconds;
  const double settle_s = budget_s > 0 && steps_ == 0 ? budget_settle_seconds(budget_s) : 0;
  int passes = 0;
  auto work_start = t0;  // the first pass builds plans; the work is counted after it
  while (!o_.eval.only) {
    const int m = settle_s > 0 ? ops_->mark() : 0;
    // As a step's last micro-batch: with hybrid sharding its all-reduce
    // across replicas then connects that communicator here too (NCCL
    // connects on first use), not in the middle of step 1's backward.
    engine_->forward_backward(/*last_of_step=*/true);
    engine_->discard_gradients();
    ++passes;
    if (settle_s == 0) break;
    ops_->seconds(m, ops_->mark());  // waits for the device's work, not only its enqueueing
    if (passes == 1) work_start = std::chrono::steady_clock::now();
    float short_s = float(settle_s - seconds_since(work_start));
    groups_.world->all_reduce(&short_s, 1, DType::f32, ReduceOp::max)->wait();
    if (short_s <= 0) break;
  }
  if (val_batches_) {  // validation's shape may need graphs of its own
    use_validation_shape(true);
    model_->set_batch(inputs_.data(), targets_.data(), 0.0f);
    engine_->forward_only();
    use_validation_shape(false);
  }
  const double seconds = seconds_since(t0);
  if (!lead_) return;
  if (passes > 1)
    std::printf(
        "fsdptrain: warm-up (%d forward+backward passes, discarded: --time-budget times steps "
        "after %.1f s of work, at the clock the device keeps) took %.2f s\n",
        passes, settle_s, seconds);
  else
    std::printf("fsdptrain: warm-up (one %s, discarded) took %.2f s\n",
                o_.eval.only ? "forward" : "forward+backward", seconds);
  for (const std::string& line : ops_->runtime_report())
    std::printf("fsdptrain: %s\n", line.c_str());
  std::fflush(stdout);
}

// Before the first step: the loaded weights checked, the warm-up, a signal
// that came during set-up, --eval-only's whole run, and the validation and
// save a run starts with. Returns whether steps follow.
bool Trainer::start_run(TrainSummary& summary) {
  install_stop_handlers();
  start_ = std::chrono::steady_clock::now();
  if (!pos_.resumed_from.empty() && !engine_->masters_finite())
    throw_agreed_error(
        "--resume: '", pos_.resumed_from,
        "' holds NaN or Inf weights; resume from an earlier checkpoint (--resume PATH)");
  if (!pos_.initialised_from.empty() && !engine_->masters_finite())
    throw_agreed_error("--init-from: '", pos_.initialised_from,
                       "' holds NaN or Inf weights; start from another checkpoint");
  warm_up();
  // A signal during set-up is acted on here, before any step: nothing new
  // would be saved, and requeueing could repeat this forever (kExitStoppedBeforeFirstStep).
  if ((steps_ == 0 || pos_.step < steps_) && agree_at_step_boundary()) {
    if (lead_)
      std::printf(
          "fsdptrain: %s arrived before the first step of this run: nothing new to save, "
          "exiting with status %d (a batch script must not requeue; if it came from the time "
          "limit, the --signal lead time is longer than the job's --time)\n",
          stop_signal_name() ? stop_signal_name() : "a stop signal", kExitStoppedBeforeFirstStep);
    summary.stopped_before_first_step = true;
    return false;
  }
  if (o_.eval.only) {
    evaluate_only(summary);
    print_samples(int(pos_.step));
    return false;
  }
  // A budget not yet fixed times a validation for its plan.
  const bool budget = o_.run.time_budget.seconds > 0;
  if ((o_.eval.every > 0 && pos_.step == 0) || (budget && steps_ == 0))
    validate(int(pos_.step), summary);
  // A rollback goes back to a checkpoint: a run that starts without one saves its start.
  if (o_.divergence.action == OnDivergence::rollback && pos_.resumed_from.empty()) save();
  return true;
}

// A step's clocks: host time from its start, and device time between marks
// on the compute stream (on a GPU what the device spent, whatever the host
// ran ahead: Ops::mark); marks left by an evaluation or the previous step are
// dropped first. --profile-ops counts from the run's second step, the first
// building plans and caches.
Trainer::StepClock Trainer::start_step_clock(int step, int first_step) {
  StepClock c{std::chrono::steady_clock::now(), 0};
  engine_->discard_timing();
  ops_->clear_marks();
  c.mark = ops_->mark();
  if (profiler_ && step > first_step) profiler_->set_enabled(true), profiler_->count_step();
  return c;
}

// Waits for the step's last op. The host seconds (tests only:
// FSDP_TEST_SLOW_STEPS may stretch them) add up to the run's clocks.
Trainer::StepTimes Trainer::stop_step_clock(const StepClock& c, int step, int first_step) {
  StepTimes t;
  t.device_s = ops_->seconds(c.mark, ops_->mark());
  t.host_s = test_hooks::slow_step(
      step + 1, std::chrono::duration<double>(std::chrono::steady_clock::now() - c.host).count());
  train_seconds_ += t.host_s;  // a step undone by a rollback took time all the same
  if (step > first_step) run_step_s_ += t.host_s, ++run_steps_;
  if (profiler_) profiler_->set_enabled(false);  // evaluation and saves are not steps
  return t;
}

// An applied step: the spike detector's window, the run's position, the
// summary and the progress line.
void Trainer::accept_step(int step, double loss, float lr, double norm, double device_s,
                          TrainSummary& summary) {
  spikes_.accept(loss);
  pos_.step = step + 1;
  pos_.tokens_seen += o_.data.tokens_per_step(world_.size);
  summary.train_loss.push_back(loss);
  log_step(step, loss, lr, norm, device_s);
}

// The cadences after applied step `done`: the time budget's plans, then (at
// the last step, or on their periods) validation, the budget's report,
// samples and a save; a stop (--stop-at-step, or a signal every rank agreed
// on) saves too and ends the run early: returns false then.
bool Trainer::after_step(int done, double host_s, TrainSummary& summary) {
  budget_after_step(done, host_s);
  const bool last = done == steps_;
  if (last || every(o_.eval.every, done)) validate(done, summary);
  if (last && o_.run.time_budget.seconds > 0) report_time_budget(budget_used_s());
  if (last || every(o_.sample.every, done)) print_samples(done);
  const bool stop = done == o_.run.stop_at_step || agree_at_step_boundary();
  const bool checkpoints = !o_.checkpoint.dir.empty();
  if (checkpoints && (last || stop || every(o_.checkpoint.every, done))) save();
  if (!stop || last) return true;
  if (lead_)
    std::printf("fsdptrain: stopping after step %d (%s); continue with --resume auto\n", done,
                stop_signal_name() ? stop_signal_name() : "--stop-at-step");
  return false;
}

// One iteration is docs/ARCHITECTURE.md's "One optimizer step": the batch's
// forward and backward, the gradients judged before they change a weight,
// then the cadences. A diverged step is rerun to tell a device fault from the
// data, then refused or rolled back.
TrainSummary Trainer::run() {
  TrainSummary summary;
  if (!start_run(summary)) return summary;
  const int first_step = int(pos_.step);
  for (int step = first_step; steps_ == 0 || step < steps_; ++step) {
    const StepClock clock = start_step_clock(step, first_step);
    // Until a budget fixes the count, the steps are warmup steps, whose rate
    // does not depend on it.
    FSDP_CHECK(steps_ > 0 || step < o_.schedule.warmup_steps, "step ", step, " of no count");
    const float lr = lr_at(step, steps_, o_.schedule);
    const SamplerState before = loader_->state();
    const StepLoss loss = train_step(step);
    // The update waits until the loss and the gradient norm are judged
    // (src/divergence.h): a diverged step changes no weight and reaches no
    // checkpoint.
    const GradientNorms norms = engine_->measure_gradients();
    const std::string diverged = spikes_.judge(loss.mean, norms.total);
    if (diverged.empty()) engine_->apply_update(o_.optimizer, lr, norms);
    const StepTimes t = stop_step_clock(clock, step, first_step);
    if (!diverged.empty()) {
      DivergedStep d{.step = step, .loss = loss.mean, .norms = norms, .why = diverged};
      rerun_diverged_step(d, before, loss);  // returns only if reproduced
      // The loop's ++step makes it the checkpoint's step.
      step = int(roll_back_or_stop(d, summary)) - 1;
      continue;
    }
    accept_step(step, loss.mean, lr, norms.total, t.device_s, summary);
    if (!after_step(step + 1, t.host_s, summary)) break;
  }
  // The last save may still be in flight: the run ends when it is written.
  finish_background_save();
  if (profiler_ && lead_) std::printf("%s", profiler_->report().c_str());
  return summary;
}

}  // namespace fsdp
