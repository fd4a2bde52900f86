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
#include "data/token_stream.h"
#include "model/op_profiler.h"
#include "model/ops.h"
#include "model/transformer.h"
#include "shard/engine.h"
#include "shard/memory_plan.h"
#include "src/options/options.h"
#include "src/policy/divergence.h"
#include "src/policy/memory_check.h"
#include "src/trainer/checkpointer.h"
#include "src/trainer/checkpointing.h"
#include "src/trainer/forward_pass.h"
#include "src/trainer/metrics.h"
#include "src/trainer/samples.h"
#include "src/trainer/step_budget.h"
#include "src/trainer/validator.h"

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
// (src/trainer/trainer_rerun.cpp). Nothing of that step was saved; a batch script
// requeues the job without the node named (slurm/h100_4node.sh).
inline constexpr int kExitTransientFault = 4;

// One step's loss: the global mean every rank agrees on, and this rank's own
// sum before any reduction (what a rerun of the step compares).
struct StepLoss {
  double mean = 0;
  double local_sum = 0;
};

// A diverged step (src/policy/divergence.h says which are), after its rerun
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
  // run()'s parts (src/trainer/trainer.cpp): what comes before the first step, a
  // step's clocks, an applied step's bookkeeping and the cadences after it,
  // each decided by the component that owns it.
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
  bool after_step(int done, TrainSummary& summary);
  void warm_up();
  void warm_up_schedules();
  StepLoss train_step(int step);
  // Step `step`'s micro-batches and the tokens all ranks train on in them:
  // --grad-accum's and --batch-size's but in a batch warm-up.
  int micro_batches(int step) const;
  int64_t step_tokens(int step) const;
  // One validation (none without --val-data), in the summary and timed for
  // the budget; --eval-only's run; samples. The forwards they run with.
  void validate(int steps_done, TrainSummary& summary);
  void evaluate_only(TrainSummary& summary);
  void print_samples(int step);
  ForwardPass forward_pass() { return {*model_, *engine_, inputs_, targets_}; }
  void log_run_start();
  void log_step(int step, double loss, float lr, double norm, double seconds);
  double mfu(double tokens_per_s, int seq_len) const;
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
  // A save of the run's position, with the budget's count and clock and the
  // spike detector's window (Checkpointer::save). Collective.
  void save();
  // A diverged step is first computed again from the same state
  // (src/trainer/trainer_rerun.cpp): a rank whose result changed had a transient
  // fault, and the run ends (kExitTransientFault) naming it. `before` is the
  // data position the step started from.
  void rerun_diverged_step(DivergedStep& d, const SamplerState& before, const StepLoss& first);
  [[noreturn]] void stop_for_transient_fault(const DivergedStep& d, const std::vector<int>& ranks);
  // A reproduced one (src/trainer/trainer_rollback.cpp): refused, ending the run, or
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
  int document_end_ = -1;  // --document-mask: the data's end-of-text id
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<OpProfiler> profiler_;        // --profile-ops: ops_'s hook
  ProcessGroups groups_;                        // MPI, host memory
  std::optional<ProcessGroups> device_groups_;  // NCCL on a GPU, or --device-comm staged
  std::unique_ptr<Transformer> model_;
  std::unique_ptr<FsdpEngine> engine_;
  std::unique_ptr<BatchLoader> loader_;
  MetricsLog metrics_;
  std::vector<int32_t> inputs_, targets_;  // one micro-batch, host side
  // The components that own the run's cadences: the step count and
  // --time-budget (made with the host groups), samples, validation (with
  // --val-data) and the saves (once the engine is built).
  std::optional<StepBudget> budget_;
  std::optional<Samples> samples_;
  std::unique_ptr<Validator> validator_;
  std::optional<Checkpointer> checkpointer_;
  RunPosition pos_;
  SpikeDetector spikes_;  // judges each step's loss (src/policy/divergence.h)
  // Tests only: FSDP_TEST_TRANSIENT_FAULT and FSDP_TEST_SPIKE_POSITION
  // (common/test_hooks.h), consulted once a step (train_step).
  test_hooks::StepFaults test_faults_{world_.rank, world_.local_rank, node_name()};
  std::chrono::steady_clock::time_point start_;
  // Host seconds in this process's training steps: evaluation, samples,
  // checkpoints and the warm-up left out (the clock of a time-to-loss curve).
  double train_seconds_ = 0;
  double step_seconds_total_ = 0;
  int steps_timed_ = 0;
};

}  // namespace fsdp
