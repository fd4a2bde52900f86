// The training loop (Trainer::run) and its parts: the warm-up, what comes
// before the first step, a step's micro-batches and clocks, its progress
// line, and the cadences after it. The set-up is in trainer_setup.cpp.
#include "src/trainer/trainer.h"

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "comm/agree.h"
#include "common/test_hooks.h"
#include "model/params.h"
#include "src/policy/batch_warmup.h"
#include "src/policy/cadence.h"
#include "src/policy/lr_schedule.h"
#include "src/policy/seq_warmup.h"
#include "src/policy/stop_signal.h"

namespace fsdp {

namespace {

int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

std::pair<double, double> Trainer::global_sum(double a, double b) {
  float v[2] = {float(a), float(b)};
  groups_.world->all_reduce(v, 2, DType::f32, ReduceOp::sum)->wait();
  return {v[0], v[1]};
}

int Trainer::micro_batches(int step) const {
  return batch_warmup_micro_batches(o_.batch_warmup, step, o_.data.grad_accum);
}

int64_t Trainer::step_tokens(int step) const {
  return o_.data.tokens_per_step(world_.size) / o_.data.grad_accum * micro_batches(step);
}

StepLoss Trainer::train_step(int step) {
  // Gradients are averaged over the global batch exactly once, here: every
  // token's loss is scaled by 1 / (tokens in the global batch), which is
  // smaller in a batch warm-up (src/policy/batch_warmup.h).
  const double global_tokens = double(step_tokens(step));
  const int accum = micro_batches(step);
  FSDP_CHECK(accum == loader_->micro_batches(), "step ", step, " of ", accum,
             " micro-batches, the data loader's ", loader_->micro_batches());
  // Tests only (common/test_hooks.h): all 1 unless an FSDP_TEST_* fault is
  // asked for at this step.
  const test_hooks::StepFault fault =
      test_faults_.begin_step(step + 1, loader_->state().consumed, loader_->sequences_per_step());
  const float grad_scale = float(1.0 / global_tokens) * fault.grad_scale;
  // --seq-warmup-steps (src/policy/seq_warmup.h): the same B x T tokens as
  // B*T/c sequences of the step's context c; the model is back in its own
  // shape after the step, for validation and samples.
  const int B = o_.data.batch_size, T = o_.data.seq_len;
  const int context = seq_warmup_context(o_.seq_warmup, step, T);
  model_->set_shape(int(int64_t(B) * T / context), context);
  double loss_sum = 0, count = 0;
  for (int m = 0; m < accum; ++m) {
    loader_->next_micro_batch(m, inputs_.data(), targets_.data());
    model_->set_batch(inputs_.data(), targets_.data(), grad_scale);
    engine_->forward_backward(m + 1 == accum);
    loss_sum += model_->loss_sum();
    count += double(model_->loss_count());
  }
  model_->set_shape(B, T);
  loader_->end_step();
  loss_sum *= fault.local_loss_scale;
  auto [s, c] = global_sum(loss_sum, count);
  s *= fault.global_loss_scale;
  return {s / c, loss_sum};
}

// Model FLOPs utilisation (docs/ARCHITECTURE.md, "FLOPs and MFU"): useful FLOPs
// per token (recomputation excluded) times tokens/s over the dense peak of all
// GPUs; none on the CPU.
double Trainer::mfu(double tokens_per_s, int seq_len) const {
  const double peak = ops_->capabilities().peak_flops;
  if (peak <= 0) return std::nan("");
  return tokens_per_s * flops_per_token(o_.model, seq_len) / (peak * world_.size);
}

// Each training process's first metrics line, written once set-up and
// warm-up have succeeded (a fresh run that fails before leaves the earlier
// run's file as it was): the wall-clock time its steps' elapsed_s count
// from, where it starts, on how many ranks, and every option. --eval-only
// writes none: its options are not the run's. A dashboard follower
// (tools/follow_metrics.py) dates the points by it and logs the options as
// hyperparameters; the record has no "step", so readers of steps skip it.
void Trainer::log_run_start() {
  if (!lead_) return;
  const double since_start =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double now_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  char start_unix[32];
  std::snprintf(start_unix, sizeof start_unix, "%.3f", now_unix - since_start);
  metrics_.write({{"run_start_unix_s", start_unix},
                  {"start_step", std::to_string(pos_.step)},
                  {"resumed_from", pos_.resumed_from.empty() ? std::string("null")
                                                             : json_string(pos_.resumed_from)},
                  {"ranks", std::to_string(world_.size)},
                  {"config", options_json(o_)}});
}

void Trainer::log_step(int step, double loss, float lr, double norm, double seconds) {
  const double tok_s = double(step_tokens(step)) / seconds;
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
  // The step's context: --seq-len's but in a sequence warm-up, whose steps'
  // records say theirs (attention's FLOPs count at it).
  const int context = seq_warmup_context(o_.seq_warmup, step, o_.data.seq_len);
  std::vector<std::pair<std::string, std::string>> record{
      {"step", std::to_string(step + 1)},
      {"loss", json_number(loss)},
      {"lr", json_number(lr)},
      {"grad_norm", json_number(norm)},
      {"tokens_seen", std::to_string(pos_.tokens_seen)},
      {"tokens_per_s", json_number(tok_s)},
      {"data_wait_s", json_number(loader_->last_step_wait_seconds())},
      {"comm_wait_s", json_number(engine_->take_comm_wait_seconds())},
      {"mfu", json_number(mfu(tok_s, context))},
      {"peak_rss_bytes_max_rank", json_number(peak[0])},
      {"peak_device_bytes_max_rank", json_number(peak[1])},
      {"elapsed_s", json_number(elapsed)},
      {"train_s", json_number(train_seconds_)}};
  if (o_.seq_warmup.on()) record.emplace_back("seq_len", std::to_string(context));
  // A batch warm-up's steps say their global batch (sequences).
  if (o_.batch_warmup.on())
    record.emplace_back("global_batch", std::to_string(step_tokens(step) / o_.data.seq_len));
  metrics_.write(record);
  const int steps = budget_->steps();
  if (lead_ && (every(o_.run.log_every, step + 1) || step + 1 == steps)) {
    std::printf("step %5d/%s | loss %.4f | lr %.2e | norm %.3f | %s tok/s | ETA %s\n", step + 1,
                budget_->steps_text().c_str(), loss, lr, norm, format_rate(tok_s).c_str(),
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
                    checkpointer_->background_save_done() ? 0.0f : 1.0f};
  groups_.world->all_reduce(flags, 2, DType::f32, ReduceOp::max)->wait();
  if (flags[1] == 0) checkpointer_->finish_background_save();
  return flags[0] > 0;
}

// One validation: in the summary, and its time for the budget's plan.
void Trainer::validate(int steps_done, TrainSummary& summary) {
  const double v = validator_->validate(steps_done, train_seconds_, budget_->steps_text());
  summary.val_loss.emplace_back(steps_done, v);
  budget_->time_validation(validator_->last_seconds());
}

void Trainer::evaluate_only(TrainSummary& summary) {
  const auto [step, loss] = validator_->evaluate_only(pos_);
  summary.val_loss.emplace_back(int(step), loss);
}

void Trainer::print_samples(int step) {
  samples_->print(step, forward_pass());
}

// A save holds the position as it is once the save before it is finished:
// the budget's count and clock then, and the spike detector's window.
void Trainer::save() {
  checkpointer_->save(pos_.step, budget_->steps_text(), [&] {
    budget_->record(pos_);
    pos_.loss_history = spikes_.history();
    return pos_;
  });
}

// One forward+backward on the shapes of a real step, gradients then dropped:
// cuDNN graphs, cuBLASLt plans and NCCL connections are built here, so a
// configuration the GPU libraries cannot run stops before step 1, and step 1's
// time is a step's. Tokens 0 are valid for any vocabulary. On the CPU it
// costs one micro-batch and exercises the same path.
//
// A run whose --time-budget count is still to be fixed repeats the pass
// until the device has worked for budget_settle_seconds after the first one
// (src/policy/time_budget.h), so that the steps it times run at the clock the rest
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
  const double settle_s = budget_->settle_seconds();
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
  if (!o_.eval.only) warm_up_schedules();
  if (validator_) validator_->warm_up();  // validation's shape may need graphs of its own
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

// The warm-ups' steps still to come. --seq-warmup-steps: one discarded pass
// at each shorter context they will use, so its plans (cuDNN builds a graph
// per shape) are built before step 1 too. Under --time-budget, what each of
// those steps saves against a full one, so the plan counts them at their
// cost and converts the steps it times to full ones
// (StepBudget::set_step_savings): a micro-batch at context c saves what a
// pass at c takes less than one at --seq-len, and each micro-batch a
// --batch-warmup-steps step leaves out saves a --grad-accum step's time less
// a one-micro-batch step's, over --grad-accum - 1 (device time, the
// gradients' reduction included: a pass alone ends before its reduce-scatter
// does). Each is the lesser of two tries, the --grad-accum step the greater;
// every rank keeps the least saving any measured for a context, the most
// for a micro-batch.
void Trainer::warm_up_schedules() {
  const int B = o_.data.batch_size, T = o_.data.seq_len, accum = o_.data.grad_accum;
  const std::vector<int> contexts = seq_warmup_contexts(o_.seq_warmup, pos_.step, T);
  const bool timed = budget_->active();
  const bool fewer = timed && micro_batches(int(pos_.step)) < accum;  // monotone: none later
  if (contexts.empty() && !fewer) return;
  // The lesser (or the greater: `most`) of two tries of a step's `passes`
  // micro-batches at context c, to its gradients' reduction (discarded).
  auto steps_s = [&](int c, int passes, bool most = false) {
    model_->set_shape(int(int64_t(B) * T / c), c);
    model_->set_batch(inputs_.data(), targets_.data(), 1.0f / float(inputs_.size()));
    double kept = 0;
    for (int i = 0; i < (timed ? 2 : 1); ++i) {
      const int m = ops_->mark();
      for (int p = 0; p < passes; ++p) engine_->forward_backward(p + 1 == passes);
      engine_->discard_gradients();
      const double s = ops_->seconds(m, ops_->mark());
      kept = i == 0 ? s : most ? std::max(kept, s) : std::min(kept, s);
    }
    return kept;
  };
  const double full_s = timed && !contexts.empty() ? steps_s(T, 1) : 0;
  // Each context's saving negated, so that the all-reduce's max keeps the
  // least, then a micro-batch's as it is.
  std::vector<float> minus_saved;
  for (int c : contexts) minus_saved.push_back(-float(std::max(0.0, full_s - steps_s(c, 1))));
  // What one more micro-batch adds to a step, taken at its most: the plan
  // turns the timed (short) steps into full ones by adding it, so too little
  // would plan too many steps; too much only ends the run early.
  const double micro_s =
      fewer ? std::max(0.0, steps_s(T, accum, true) - steps_s(T, 1)) / double(accum - 1) : 0;
  minus_saved.push_back(float(micro_s));
  model_->set_shape(B, T);
  model_->set_batch(inputs_.data(), targets_.data(), 1.0f / float(inputs_.size()));
  if (!timed) return;
  groups_.world->all_reduce(minus_saved.data(), minus_saved.size(), DType::f32, ReduceOp::max)
      ->wait();
  const double per_micro_batch = double(minus_saved.back());
  std::vector<double> by_step(size_t(std::max(o_.seq_warmup.steps, o_.batch_warmup.steps)), 0.0);
  for (size_t s = size_t(pos_.step); s < by_step.size(); ++s) {
    const int c = seq_warmup_context(o_.seq_warmup, int64_t(s), T), a = micro_batches(int(s));
    const auto i = std::find(contexts.begin(), contexts.end(), c) - contexts.begin();
    by_step[s] = (accum - a) * per_micro_batch + (c < T ? -a * double(minus_saved[size_t(i)]) : 0);
  }
  budget_->set_step_savings(std::move(by_step));
  if (!lead_) return;
  if (!contexts.empty()) {
    std::printf("fsdptrain: --seq-warmup-steps %d: a micro-batch at context", o_.seq_warmup.steps);
    for (size_t i = 0; i < contexts.size(); ++i)
      std::printf("%s %d saves %.4f s", i ? "," : "", contexts[i], -double(minus_saved[i]));
    std::printf(" against one at %d (%.4f s a pass), in --time-budget's plan\n", T, full_s);
  }
  if (fewer)
    std::printf(
        "fsdptrain: --batch-warmup-steps %d: each micro-batch a step leaves out saves %.4f s, in "
        "--time-budget's plan\n",
        o_.batch_warmup.steps, per_micro_batch);
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
  const int steps = budget_->steps();
  if ((steps == 0 || pos_.step < steps) && agree_at_step_boundary()) {
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
  log_run_start();
  // A budget not yet fixed times a validation for its plan.
  if (validator_ && validator_->due_at_start(pos_.step, budget_->times_validation_first()))
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
  budget_->time_step(step, t.host_s, step > first_step);
  if (profiler_) profiler_->set_enabled(false);  // evaluation and saves are not steps
  return t;
}

// An applied step: the spike detector's window, the run's position, the
// summary and the progress line.
void Trainer::accept_step(int step, double loss, float lr, double norm, double device_s,
                          TrainSummary& summary) {
  spikes_.accept(loss);
  pos_.step = step + 1;
  pos_.tokens_seen += step_tokens(step);
  summary.train_loss.push_back(loss);
  log_step(step, loss, lr, norm, device_s);
}

// The cadences after applied step `done`, each decided by its component: the
// time budget's plans, validation, the budget's report at the end, samples;
// then a stop (--stop-at-step, or a signal every rank agreed on) and a save.
// A stop ends the run early: returns false then.
bool Trainer::after_step(int done, TrainSummary& summary) {
  budget_->after_step(done);
  const bool last = done == budget_->steps();
  if (validator_ && validator_->due(done, last)) validate(done, summary);
  if (last) budget_->report_end();
  if (samples_->due(done, last)) print_samples(done);
  const bool stop = done == o_.run.stop_at_step || agree_at_step_boundary();
  if (checkpointer_->due(done, last, stop)) save();
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
  for (int step = first_step; budget_->steps() == 0 || step < budget_->steps(); ++step) {
    const StepClock clock = start_step_clock(step, first_step);
    // Until a budget fixes the count, the steps are warmup steps, whose rate
    // does not depend on it.
    const int steps = budget_->steps();
    FSDP_CHECK(steps > 0 || step < o_.schedule.warmup_steps, "step ", step, " of no count");
    const float lr = lr_at(step, steps, o_.schedule);
    const SamplerState before = loader_->state();
    const StepLoss loss = train_step(step);
    // The update waits until the loss and the gradient norm are judged
    // (src/policy/divergence.h): a diverged step changes no weight and reaches no
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
    if (!after_step(step + 1, summary)) break;
  }
  // The last save may still be in flight: the run ends when it is written.
  checkpointer_->finish_background_save();
  if (profiler_ && lead_) std::printf("%s", profiler_->report().c_str());
  return summary;
}

}  // namespace fsdp
