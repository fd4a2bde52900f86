// The training run: data, model, FSDP engine and the loop over steps.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/process_groups.h"
#include "comm/runtime.h"
#include "common/test_hooks.h"
#include "data/batch_loader.h"
#include "data/token_decoder.h"
#include "data/token_stream.h"
#include "model/op_profiler.h"
#include "model/ops.h"
#include "model/transformer.h"
#include "shard/engine.h"
#include "shard/memory_plan.h"
#include "src/checkpointing.h"
#include "src/divergence.h"
#include "src/memory_check.h"
#include "src/metrics.h"
#include "src/options.h"
#include "src/time_budget.h"

namespace fsdp {

struct TrainSummary {
  std::vector<double> train_loss;                // one per step
  std::vector<std::pair<int, double>> val_loss;  // (steps done, loss)
  // A stop signal was already pending before this run's first step: nothing
  // new was trained or saved (main exits kExitStoppedBeforeFirstStep).
  bool stopped_before_first_step = false;
};

// The exit status of a run stopped before its first step. A batch script must
// not requeue on it: a preemption signal that comes before any step (a
// --signal lead longer than the job's time) would otherwise requeue forever.
inline constexpr int kExitStoppedBeforeFirstStep = 3;
// The exit status of a run stopped by a transient fault: a diverged step
// whose rerun from the same state gave another result on some rank
// (src/trainer_rerun.cpp). Nothing of that step was saved; a batch script
// requeues the job without the node named (slurm/h100_4node.sh).
inline constexpr int kExitTransientFault = 4;

// One step's loss: the global mean every rank agrees on, and this rank's own
// sum before any reduction (what a rerun of the step compares).
struct StepLoss {
  double mean = 0;
  double local_sum = 0;
};

// A diverged step (src/divergence.h says which are), after its rerun
// reproduced it: what the metrics, the log and an error report.
struct DivergedStep {
  int step = 0;  // 0-based
  double loss = 0;
  GradientNorms norms;
  std::string why;
  double rerun_loss = 0, rerun_norm = 0;
  // Its --metrics record's fields, to which what was done about it is added.
  std::vector<std::pair<std::string, std::string>> record() const;
};

class Trainer {
 public:
  // Validates options and data and builds everything; throws fsdp::Error for
  // anything the user must fix. Collective over MPI_COMM_WORLD.
  Trainer(const Options& options, const WorldInfo& world);
  ~Trainer();
  TrainSummary run();

  FsdpEngine& engine() { return *engine_; }

 private:
  // run()'s parts (src/trainer.cpp): what comes before the first step, a
  // step's clocks, an applied step's bookkeeping and the cadences after it.
  bool start_run(TrainSummary& summary);
  struct StepClock {
    std::chrono::steady_clock::time_point host;
    int mark = 0;  // Ops::mark at the step's start
  };
  struct StepTimes {
    double device_s = 0, host_s = 0;
  };
  StepClock start_step_clock(int step, int first_step);
  StepTimes stop_step_clock(const StepClock& c, int step, int first_step);
  void accept_step(int step, double loss, float lr, double norm, double device_s,
                   TrainSummary& summary);
  bool after_step(int done, double host_s, TrainSummary& summary);
  void warm_up();
  StepLoss train_step(int step);
  // Validation and samples (src/trainer_eval.cpp). The model's micro-batch
  // shape for validation (--eval-seq-len) or for training and samples.
  void use_validation_shape(bool validation);
  // --eval-batches 0, or more batches than one pass over the split holds.
  bool validates_whole_split() const;
  // Mean validation loss; `tokens` (if given) gets how many it covered.
  double evaluate(double* tokens = nullptr);
  void validate(int steps_done, TrainSummary& summary);
  void evaluate_only(TrainSummary& summary);
  void print_samples(int step);
  // --time-budget (src/time_budget.h): the seconds the run has used, over
  // every process that ran it; the count fixed after the timed steps; the
  // report of how the final validation's end met the budget.
  double budget_used_s() const;
  BudgetInputs budget_inputs(int done, double step_s);
  void fix_budget_count(const BudgetInputs& in, int64_t steps, double end_s, int replanned_from);
  void plan_time_budget(int done);
  void replan_time_budget(int done);
  void report_time_budget(double used_s);
  void budget_after_step(int done, double host_s);
  std::string steps_text() const;  // the step count, "?" until a budget fixes it
  void log_step(int step, double loss, float lr, double norm, double seconds);
  double mfu(double tokens_per_s) const;
  void build(ProcessGroups& engine_groups);
  // The memory plan of this run with micro-batches of `batch` sequences, and
  // what the memory check may advise changing.
  MemoryPlan memory_plan(int batch) const;
  ModelUse model_use() const;
  MemorySettings memory_settings(int batch) const;
  int auto_batch_size_everywhere();
  void print_memory_plan() const;
  // Collective, between steps: whether a stop signal reached any rank; and
  // a background save that has ended on every rank is finished here.
  bool agree_at_step_boundary();
  void save();
  // --async-checkpoint: waits for the save in flight, if any, and reports it
  // (metrics, log). Throws its error on every rank alike. Collective.
  void finish_background_save();
  // A diverged step is first computed again from the same state
  // (src/trainer_rerun.cpp): a rank whose result changed had a transient
  // fault, and the run ends (kExitTransientFault) naming it. `before` is the
  // data position the step started from.
  void rerun_diverged_step(DivergedStep& d, const SamplerState& before, const StepLoss& first);
  [[noreturn]] void stop_for_transient_fault(const DivergedStep& d, const std::vector<int>& ranks);
  // A reproduced one (src/trainer_rollback.cpp): refused, ending the run, or
  // under --on-divergence rollback undone with the steps since the newest
  // checkpoint; returns the step the run continues from.
  int64_t roll_back_or_stop(const DivergedStep& d, TrainSummary& summary);
  [[noreturn]] void refuse_diverged_step(const DivergedStep& d);
  std::pair<double, double> global_sum(double a, double b);

  // First, so that a time budget counts set-up from the very start.
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  Options o_;
  WorldInfo world_;
  bool lead_;                    // rank 0 prints and writes metrics
  std::string shard_group_why_;  // how --shard-group-size was resolved, for the start line
  int shard_group_size_;
  DirLock checkpoint_lock_;  // --checkpoint-dir is this run's until the Trainer ends
  TokenStream train_data_;
  std::optional<TokenStream> val_data_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<OpProfiler> profiler_;        // --profile-ops: ops_'s hook
  ProcessGroups groups_;                        // MPI, host memory
  std::optional<ProcessGroups> device_groups_;  // NCCL on a GPU, or --device-comm staged
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<FsdpEngine> engine_;
  std::unique_ptr<BatchLoader> loader_;
  std::unique_ptr<ValBatches> val_batches_;
  std::optional<RunCheckpoints> checkpoints_;  // save and resume, once the engine is built
  MetricsLog metrics_;
  std::vector<int32_t> inputs_, targets_;
  // What samples start from (src/sampling.h), on every rank: each runs the
  // same forwards, whose count the prompts' lengths set.
  std::vector<std::vector<int32_t>> prompts_;
  std::optional<TokenDecoder> decoder_;  // rank 0, for --samples
  std::string decoder_note_;             // why there is none
  RunPosition pos_;
  SpikeDetector spikes_;  // judges each step's loss (src/divergence.h)
  // Tests only: FSDP_TEST_TRANSIENT_FAULT and FSDP_TEST_SPIKE_POSITION
  // (common/test_hooks.h), consulted once a step (train_step).
  test_hooks::StepFaults test_faults_{world_.rank, world_.local_rank, node_name()};
  // The run's step count: --steps, or the count a time budget fixed (0 until
  // it does). Under a budget: the seconds used before this process, this
  // process's timed steps and the last validation's time.
  int steps_ = 0;
  double used_before_s_ = 0;
  std::vector<double> probe_step_s_;
  // Every step of this process but its first, for wsd's second plan.
  double run_step_s_ = 0;
  int64_t run_steps_ = 0;
  double eval_s_ = 0;
  std::chrono::steady_clock::time_point start_;
  // Host seconds in this process's training steps: evaluation, samples,
  // checkpoints and the warm-up left out (the clock of a time-to-loss curve).
  double train_seconds_ = 0;
  double step_seconds_total_ = 0;
  int steps_timed_ = 0;
};

}  // namespace fsdp
