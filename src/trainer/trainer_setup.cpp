// The Trainer's set-up (trainer.h): the options and data checked, the
// process groups, the memory plan against free memory, the model, engine and
// components built, the checkpoint resumed, and the plan printed. Everything
// the user can get wrong is said before anything large is allocated.
#include <cstdio>

#include "checkpoint/checkpoint.h"
#include "comm/agree.h"
#include "common/test_hooks.h"
#include "model/params.h"
#include "shard/memory_plan.h"
#include "src/policy/batch_warmup.h"
#include "src/policy/memory_check.h"
#include "src/policy/time_budget.h"
#include "src/trainer/backend.h"
#include "src/trainer/trainer.h"

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

// --document-mask reads where documents end from the data's eos_id (the
// end-of-text id prepare_data.py stores where the tokenizer has one), every
// file the model reads agreeing on it. Returns the id.
int document_end(const Options& o, const TokenStream& train,
                 const std::optional<TokenStream>& val) {
  std::optional<int> eos;
  for (const TokenStream* d : {&train, val ? &*val : nullptr}) {
    if (!d || (d == &train && o.data.train_data.empty())) continue;  // --eval-only's stand-in
    if (!d->eos_id())
      throw_error("--document-mask true: ", d->flag(), " ", d->describe(),
                  " states no eos_id, so where its documents end is unknown; make it with "
                  "prepare_data.py and a tokenizer that has an end-of-text token, or leave "
                  "--document-mask out");
    if (eos && *eos != *d->eos_id())
      throw_error("--document-mask true: ", d->flag(), " ", d->describe(), " has eos_id ",
                  *d->eos_id(), " but ", train.flag(), " has ", *eos,
                  "; make both with one tokenizer");
    eos = d->eos_id();
  }
  return eos.value_or(-1);
}

double mib(int64_t bytes) {
  return double(bytes) / (1 << 20);
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
    if (o_.model.document_mask) document_end_ = document_end(o_, train_data_, val_data_);
    test_hooks::stall_spec();  // a malformed FSDP_TEST_STALL, as early
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
  all_or_none(W,
              [&] { samples_.emplace(o_, val_data_ ? *val_data_ : train_data_, metrics_, lead_); });

  // Everything the user can get wrong is checked above; now build.
  all_or_none(W, [&] { ops_ = make_ops(device, o_, world_); });
  if (o_.run.profile_ops) profiler_ = std::make_unique<OpProfiler>(*ops_);
  // Tests only: over NCCL the hook sits in its set-up (comm/nccl_communicator.cpp).
  const bool nccl = device == Device::cuda && o_.compute.device_comm != DeviceComm::staged;
  if (!nccl) test_hooks::stall_at_init(world_.rank);
  groups_ = make_process_groups(Backend::mpi, shard_group_size_);
  budget_.emplace(o_, *groups_.world, metrics_, lead_, created_);
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
  checkpointer_.emplace(o_, CheckpointContext{o_.model, *engine_, *ops_, W}, loader_.get(),
                        metrics_, lead_);
  pos_ = checkpointer_->resume();
  spikes_.restore(pos_.loss_history);
  // The step count: under a time budget the checkpoint's fixed count, or
  // --steps where it caps the run within the timed steps, or 0 until the
  // budget fixes it (StepBudget::after_step).
  budget_->start(pos_, o_.eval.only);
  // Lines of another run would read as this one's (plot_metrics: "replaced on resume").
  if (metrics_.begin(!pos_.resumed_from.empty() || o_.eval.only))
    std::printf(
        "fsdptrain: --metrics '%s' holds an earlier run's lines; this fresh run starts "
        "it anew (a resumed run appends)\n",
        o_.run.metrics.c_str());
  const size_t n = size_t(batch) * o_.data.seq_len;
  inputs_.resize(n);
  targets_.resize(n);
  if (lead_) print_memory_plan();
}

// The rank-local part of set-up: memory on the device, the reader thread.
void Trainer::build(ProcessGroups& engine_groups) {
  const DataOptions& d = o_.data;
  model_ = std::make_unique<Transformer>(o_.model, *ops_, d.batch_size, d.seq_len,
                                         o_.compute.recompute, o_.compute.fp8(), 0, model_use());
  model_->set_document_end(document_end_);
  EngineOptions eo = o_.engine;
  eo.seed = o_.run.seed;
  eo.check_finite = o_.run.debug;
  engine_ = std::make_unique<FsdpEngine>(*model_, *ops_, *engine_groups.shard,
                                         engine_groups.replicate.get(), eo, groups_.shard.get());
  // Every rank is a data-parallel rank: shard and replicate groups both split data.
  // A batch warm-up's steps read fewer micro-batches (src/policy/batch_warmup.h).
  LoaderOptions reading;
  if (o_.batch_warmup.on())
    reading.micro_batches = [w = o_.batch_warmup, accum = d.grad_accum](int64_t step) {
      return batch_warmup_micro_batches(w, step, accum);
    };
  if (!o_.eval.only)
    loader_ = std::make_unique<BatchLoader>(train_data_, d.seq_len, d.batch_size, d.grad_accum,
                                            world_.rank, world_.size, o_.run.seed, reading);
  if (val_data_)
    validator_ = std::make_unique<Validator>(o_, *val_data_, forward_pass(), *groups_.world,
                                             world_.rank, world_.size, metrics_, lead_);
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
                                .normuon = o_.optimizer.muon.normuon,
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
      num_params(m) / 1e6, m.n_layer, m.d_model, m.n_head, m.n_kv_head,
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
  const int steps_n = budget_->steps();
  const std::string steps =
      steps_n > 0
          ? std::to_string(steps_n) + " steps"
          : "the steps fixed by --time-budget " + format_value(o_.run.time_budget) +
                " after timing the first " + std::to_string(budget_probe_steps(o_.schedule));
  if (loader_)
    std::printf(
        "fsdptrain: global batch %lld sequences x %d tokens; %s; data %s "
        "(%lld tokens, %lld windows per epoch)\n",
        (long long)o_.data.sequences_per_step(world_.size), o_.data.seq_len, steps.c_str(),
        train_data_.describe().c_str(), (long long)train_data_.size(),
        (long long)loader_->sampler().windows_per_epoch());
  else
    std::printf("fsdptrain: evaluation only: %s (%lld tokens, %lld windows of %d)\n",
                val_data_->describe().c_str(), (long long)val_data_->size(),
                (long long)validator_->windows(), o_.eval.context(o_.data.seq_len) + 1);
  if (loader_ && o_.batch_warmup.on()) {
    const int accum = o_.data.grad_accum, first = o_.batch_warmup.start_micro_batches();
    const int last = batch_warmup_micro_batches(o_.batch_warmup, o_.batch_warmup.steps - 1, accum);
    const int64_t per_micro_batch = o_.data.sequences_per_step(world_.size) / accum;
    std::printf(
        "fsdptrain: batch warm-up: steps 1-%d run %d to %d of the %d micro-batches (%lld to %lld "
        "sequences), growing linearly (--batch-warmup-steps)\n",
        o_.batch_warmup.steps, first, last, accum, (long long)(per_micro_batch * first),
        (long long)(per_micro_batch * last));
  }
  if (validator_ && o_.eval.seq_len > 0)
    std::printf(
        "fsdptrain: validation at context %d (--eval-seq-len), %d sequences per "
        "micro-batch\n",
        o_.eval.seq_len, o_.eval.micro_batch(o_.data.batch_size, o_.data.seq_len));
  std::fflush(stdout);
}

}  // namespace fsdp
