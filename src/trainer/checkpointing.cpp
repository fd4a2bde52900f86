#include "src/trainer/checkpointing.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "checkpoint/dir.h"
#include "comm/agree.h"
#include "src/options/option_table.h"
#include "src/options/option_values.h"
#include "src/policy/time_budget.h"

namespace fsdp {

namespace {

// Throws when `dir` already holds checkpoints and no --resume was given.
void refuse_to_overwrite(const Options& o, const CheckpointDir& dir) {
  if (!o.checkpoint.resume.empty() || dir.list().empty()) return;
  throw_error("--checkpoint-dir '", o.checkpoint.dir,
              "' already holds checkpoints; pass --resume auto to continue that run, or "
              "choose another directory (nothing there is overwritten)");
}

// Says what differs between the checkpoint's run and this one, rank 0 only:
// a resumed run on other settings trains on, but never without a word. The
// global batch is the one that changes by itself, with the rank count.
void report_changes(const Options& o, const CheckpointMeta& meta, const std::string& path,
                    int world_size) {
  auto saved = ini_to_values(meta.config_text);
  const auto now = ini_to_values(options_to_ini(o));
  std::string changed;
  for (const auto& r : option_table()) {
    auto was = saved.find(r.name);
    auto is = now.find(r.name);
    // An empty text option is left out of the INI; any other missing key is
    // one the checkpoint's build did not have.
    const bool text = r.kind == OptionKind::text;
    if (was == saved.end() && !text) continue;
    const std::string a = was == saved.end() ? "" : was->second;
    const std::string b = is == now.end() ? "" : is->second;
    if (a != b)
      changed += (changed.empty() ? "" : ", ") + ("--" + r.name + " ") +
                 (a.empty() ? "(none)" : a) + " -> " + (b.empty() ? "(none)" : b);
  }
  if (!changed.empty())
    std::printf("fsdptrain: settings changed since '%s': %s\n", path.c_str(), changed.c_str());

  int batch = 0, accum = 0;
  if (!saved.count("batch-size") || !saved.count("grad-accum") ||
      !parse_value(saved["batch-size"], batch).empty() ||
      !parse_value(saved["grad-accum"], accum).empty())
    return;
  const int64_t before = int64_t(batch) * accum * meta.world_size;
  const int64_t after = o.data.sequences_per_step(world_size);
  if (before == after) return;
  std::string keep;
  if (before % world_size != 0) {
    keep = std::to_string(before) + " sequences do not split evenly over " +
           std::to_string(world_size) + " ranks";
  } else {
    const int64_t per_rank = before / world_size;
    if (per_rank % o.data.batch_size == 0)
      keep = "--grad-accum " + std::to_string(per_rank / o.data.batch_size);
    else if (per_rank % o.data.grad_accum == 0)
      keep = "--batch-size " + std::to_string(per_rank / o.data.grad_accum);
    else
      keep = "--batch-size " + std::to_string(per_rank) + " --grad-accum 1";
    keep += " keeps " + std::to_string(before);
  }
  std::fprintf(stderr,
               "fsdptrain: warning: the global batch changes from %lld to %lld sequences per step "
               "(the checkpoint's run: %d rank(s) x --batch-size %d x --grad-accum %d; this "
               "run: %d x %d x %d); %s\n",
               (long long)before, (long long)after, meta.world_size, batch, accum, world_size,
               o.data.batch_size, o.data.grad_accum, keep.c_str());
}

// Positions the data order passed over in rollbacks: a sampler state may be
// ahead of its step count by that much.
int64_t skipped_total(const CheckpointMeta& meta) {
  int64_t n = 0;
  for (size_t i = 0; i + 1 < meta.skipped_sequences.size(); i += 2)
    n += meta.skipped_sequences[i + 1] - meta.skipped_sequences[i];
  return n;
}

}  // namespace

DirLock claim_checkpoint_dir(const Options& o, MPI_Comm world) {
  DirLock lock;
  if (o.checkpoint.dir.empty()) return lock;
  int rank = 0;
  MPI_Comm_rank(world, &rank);
  all_or_none(world, [&] {
    if (rank != 0) return;
    const CheckpointDir dir(o.checkpoint.dir);
    // Found now, not at the first save after hours of training.
    dir.ensure_writable();
    std::string warning;
    lock = DirLock::acquire(o.checkpoint.dir, &warning);
    if (!warning.empty()) std::fprintf(stderr, "fsdptrain: warning: %s\n", warning.c_str());
    refuse_to_overwrite(o, dir);
    // Only the lock holder may: no other run can be writing these now.
    for (const std::string& p : dir.remove_stray_tmp())
      std::printf("fsdptrain: removed '%s', left by a save that did not finish\n", p.c_str());
  });
  return lock;
}

RunCheckpoints::RunCheckpoints(const Options& o, const CheckpointContext& context,
                               BatchLoader* loader, bool lead)
    : o_(o), context_(context), loader_(loader), lead_(lead) {
  // --eval-only (no loader) saves nothing.
  if (o.checkpoint.async && loader_) background_.emplace(context_);
}

RunCheckpoints::Loaded RunCheckpoints::load(const std::string& spec) {
  // Under auto, a damaged checkpoint (tensors failing their checksums, a
  // sampler state out of range) is skipped like one that fails to open; a
  // load rewrites all engine state, so trying the next one after a failed
  // load is safe. A sound file of another model is not damage: the user
  // changed flags, which stays an error.
  std::vector<std::string> damaged;
  Loaded l;
  while (true) {
    const ResumeChoice choice = resolve_resume(spec, o_.checkpoint.dir, context_.world, damaged);
    l.path = choice.path;
    l.warning = choice.warning;
    if (l.path.empty()) return l;
    try {
      l.meta = load_checkpoint(context_, l.path);
      l.sampler = SamplerState::from_named(l.meta.sampler, l.meta.step,
                                           "checkpoint '" + l.path + "' is damaged: /sampler",
                                           skipped_total(l.meta));
      return l;
    } catch (const Error& e) {
      if (spec != "auto" || !checkpoint_is_damaged(e.what())) throw;
      if (lead_)
        std::fprintf(stderr, "fsdptrain: warning: %s; trying an earlier checkpoint\n", e.what());
      damaged.push_back(l.path);
    }
  }
}

RunPosition RunCheckpoints::resume() {
  RunPosition pos;
  if (o_.checkpoint.resume.empty()) return init_from();
  const MPI_Comm world = context_.world;
  const Loaded loaded = load(o_.checkpoint.resume);
  const std::string& path = loaded.path;
  const CheckpointMeta& meta = loaded.meta;
  if (lead_ && !loaded.warning.empty())
    std::fprintf(stderr, "fsdptrain: warning: %s\n", loaded.warning.c_str());
  if (path.empty()) {
    if (lead_)
      std::printf("fsdptrain: no checkpoint in '%s' yet: starting %s\n", o_.checkpoint.dir.c_str(),
                  o_.checkpoint.init_from.empty() ? "fresh" : "from --init-from");
    return init_from();
  }
  // What optim/ holds must be what this run's optimizer reads: AdamW's
  // moments are not Muon's momentum (or the reverse). Every rank read the
  // same file, so every rank decides the same. --eval-only (no loader) uses
  // the weights alone, whichever optimizer trained them.
  if (loader_ && meta.optimizer != o_.optimizer.kind && !o_.checkpoint.reset_optimizer)
    throw_error("--optimizer ", choice_name(o_.optimizer.kind), ": checkpoint '", path,
                "' was trained with --optimizer ", choice_name(meta.optimizer),
                ", whose state does not carry over; pass --optimizer ", choice_name(meta.optimizer),
                " to continue it, or --reset-optimizer to keep its "
                "weights and start the optimizer state afresh");
  if (o_.checkpoint.reset_optimizer) {
    reset_optimizer_state();
    reset_through_ = meta.step;
  }
  if (loader_) loader_->restore(loaded.sampler);
  pos.step = meta.step;
  pos.tokens_seen = meta.tokens_seen;
  pos.resumed_from = path;
  pos.loss_history = meta.loss_history;
  pos.rollbacks = int(meta.rollbacks);
  pos.skipped_sequences = meta.skipped_sequences;
  // Under a time budget the count the checkpoint's run fixed stays the
  // count: the schedule of the steps taken assumed it.
  const bool budget = o_.run.time_budget.seconds > 0;
  if (budget && meta.has_budget) {
    pos.budget_steps = meta.budget_steps;
    pos.budget_used_s = meta.budget_used_s;
  }
  const int probe = budget_probe_steps(o_.schedule);
  if (loader_ && budget && pos.budget_steps == 0 && pos.step >= probe)
    throw_error("--time-budget: '", path, "' is at step ", pos.step,
                " and holds no step count fixed by a time budget (a budget fixes it after "
                "timing the first ",
                probe,
                " steps, whose learning rate does not depend on it); continue it with --steps "
                "N instead");
  const int64_t total =
      budget ? budget_steps_at_start(pos.budget_steps, o_.run.steps, o_.schedule) : o_.run.steps;
  if (loader_ && total > 0 && pos.step >= total)
    throw_error("--resume: '", path, "' is at step ", pos.step, ", which already reaches ",
                budget ? "the step count its --time-budget fixed, " : "--steps ", total,
                budget ? "; it is finished" : "; raise --steps to train further");
  if (lead_)
    std::printf("fsdptrain: %s '%s' at step %lld (saved on %d rank(s), shard group %d)\n",
                loader_ ? "resumed from" : "loaded", path.c_str(), (long long)pos.step,
                meta.world_size, meta.shard_group_size);
  if (lead_ && loader_) {
    int world_size = 1;
    MPI_Comm_size(world, &world_size);
    report_changes(o_, meta, path, world_size);
  }
  return pos;
}

// Fine-tuning or continued pretraining from someone else's weights: the
// checkpoint is loaded whole (its model checked against this run's, its
// tensors against their checksums, resharded to this rank count), then
// everything but the weights is dropped. The run is a fresh one: step 0, its
// own --seed's data order, --steps' schedule, a fresh --metrics file.
RunPosition RunCheckpoints::init_from() {
  RunPosition pos;
  const std::string& path = o_.checkpoint.init_from;
  if (path.empty()) return pos;
  CheckpointMeta meta;
  try {
    meta = load_checkpoint(context_, path);
  } catch (const Error& e) {
    throw Error(std::string("--init-from: ") + e.what());  // every rank caught the same
  }
  zero_optimizer_state();
  pos.initialised_from = path;
  pos.initialised_step = meta.step;
  if (lead_)
    std::printf(
        "fsdptrain: --init-from '%s': the weights it saved at step %lld (on %d rank(s)); "
        "optimizer state, step, schedule and data order start afresh\n",
        path.c_str(), (long long)meta.step, meta.world_size);
  return pos;
}

void RunCheckpoints::zero_optimizer_state() {
  FsdpEngine& e = context_.engine;
  for (int u = 0; u < e.num_units() && e.trains(); ++u) {
    context_.ops.zero(e.exp_avg(u));
    context_.ops.zero(e.exp_avg_sq(u));
  }
  e.set_optimizer_steps(0);
}

void RunCheckpoints::reset_optimizer_state() {
  zero_optimizer_state();
  if (lead_)
    std::printf("fsdptrain: --reset-optimizer: the optimizer state starts afresh (%s)\n",
                choice_name(o_.optimizer.kind).c_str());
}

RunPosition RunCheckpoints::roll_back(int64_t skip_to) {
  FSDP_CHECK(loader_, "a rollback needs the training data's order");
  FSDP_CHECK(!background_ || !background_->in_flight(),
             "a rollback while a background save is in flight");
  const Loaded loaded = load("auto");
  if (lead_ && !loaded.warning.empty())
    std::fprintf(stderr, "fsdptrain: warning: %s\n", loaded.warning.c_str());
  if (loaded.path.empty())
    throw_agreed_error("--on-divergence rollback: '", o_.checkpoint.dir,
                       "' holds no checkpoint to go back to (was it emptied during the run?)");
  // A checkpoint of the run this one resumed with --reset-optimizer holds
  // state this run threw away (perhaps of the other optimizer): reset again.
  if (loaded.meta.step <= reset_through_) zero_optimizer_state();
  SamplerState sampler = loaded.sampler;
  FSDP_CHECK(skip_to >= sampler.consumed, "a rollback to position ", sampler.consumed,
             " that skips to ", skip_to);
  sampler.consumed = skip_to;
  loader_->restore(sampler);
  RunPosition pos;
  pos.step = loaded.meta.step;
  pos.tokens_seen = loaded.meta.tokens_seen;
  pos.resumed_from = loaded.path;
  pos.loss_history = loaded.meta.loss_history;
  pos.rollbacks = int(loaded.meta.rollbacks);
  pos.skipped_sequences = loaded.meta.skipped_sequences;
  pos.skipped_sequences.push_back(loaded.sampler.consumed);
  pos.skipped_sequences.push_back(skip_to);
  return pos;
}

RunCheckpoints::Saving RunCheckpoints::save(const RunPosition& pos) {
  FSDP_CHECK(loader_, "saving needs the training data's order");
  CheckpointMeta meta;
  meta.step = pos.step;
  meta.tokens_seen = pos.tokens_seen;
  meta.seed = o_.run.seed;
  meta.config_text = options_to_ini(o_);
  meta.sampler = loader_->state().named();
  meta.optimizer = o_.optimizer.kind;
  meta.has_budget = o_.run.time_budget.seconds > 0;
  meta.budget_steps = pos.budget_steps;
  meta.budget_used_s = pos.budget_used_s;
  meta.loss_history = pos.loss_history;
  meta.rollbacks = pos.rollbacks;
  meta.skipped_sequences = pos.skipped_sequences;
  SaveOptions so;
  so.keep = o_.checkpoint.keep;
  so.protect = pos.resumed_from;
  Saving s;
  if (background_) {
    const BackgroundSave::Started b = background_->start(o_.checkpoint.dir, meta, so);
    s.path = b.path;
    s.background = true;
    s.copy_bytes = b.bytes;
    s.copy_s = b.copy_s;
  } else {
    s.path = save_checkpoint(context_, o_.checkpoint.dir, meta, so);
  }
  return s;
}

std::optional<BackgroundSave::Finished> RunCheckpoints::finish_background_save() {
  if (!background_) return std::nullopt;
  return background_->finish();
}

}  // namespace fsdp
