#include "src/options/option_table.h"

#include <cstdint>
#include <iterator>
#include <type_traits>
#include <utility>
#include <variant>

#include "src/options/option_values.h"

namespace fsdp {

namespace {

template <typename T>
struct Rule {
  std::function<bool(const T&, const Options&)> ok;
  std::string text;  // what the value must be, for the message
};

template <typename T>
Rule<T> at_least(T lo) {
  return {[lo](const T& v, const Options&) { return v >= lo; },
          lo == T(0) ? "must be >= 0" : "must be at least " + format_value(lo)};
}

template <typename T>
Rule<T> between(T lo, T hi) {
  return {[lo, hi](const T& v, const Options&) { return v >= lo && v <= hi; },
          "must be between " + format_value(lo) + " and " + format_value(hi)};
}

Rule<float> positive() {
  return {[](const float& v, const Options&) { return v > 0; }, "must be positive"};
}

Rule<float> fraction() {
  return {[](const float& v, const Options&) { return v >= 0 && v < 1; }, "must be in [0, 1)"};
}

template <typename T>
OptionKind kind_of() {
  if constexpr (std::is_same_v<T, bool>) return OptionKind::boolean;
  if constexpr (std::is_same_v<T, float>) return OptionKind::real;
  if constexpr (std::is_integral_v<T>) return OptionKind::integer;
  if constexpr (std::is_enum_v<T>) return OptionKind::choice;
  return OptionKind::text;
}

template <typename T>
std::string value_name_of() {
  if constexpr (std::is_same_v<T, bool>) return "true|false";
  if constexpr (std::is_same_v<T, float>) return "FLOAT";
  if constexpr (std::is_integral_v<T>) return "INT";
  if constexpr (std::is_enum_v<T>) return choice_list<T>("|", "|");
  return "TEXT";
}

// `at` reaches the field from an Options, const or not, so get, set and
// check all go through the same one path to it.
template <typename T, typename Access>
OptionRow typed(const char* name, Access at, const char* help, const char* example, Rule<T> rule) {
  OptionRow r;
  r.name = name;
  r.value_name = value_name_of<T>();
  r.help = help;
  r.kind = kind_of<T>();
  r.example = example;
  r.get = [at](const Options& o) { return format_value(at(o)); };
  r.set = [at](Options& o, std::string_view text) { return parse_value(text, at(o)); };
  if (rule.ok)
    r.check = [at, rule](const Options& o) {
      return rule.ok(at(o), o) ? std::string() : rule.text;
    };
  return r;
}

// The part of `o` (const or not) whose type is Part: each part's type appears
// once in Options, so a row names its field alone (&LrSchedule::lr).
template <typename Part, typename O>
auto& part_of(O& o) {
  if constexpr (std::is_same_v<Part, ModelConfig>)
    return o.model;
  else if constexpr (std::is_same_v<Part, DataOptions>)
    return o.data;
  else if constexpr (std::is_same_v<Part, LrSchedule>)
    return o.schedule;
  else if constexpr (std::is_same_v<Part, SeqWarmup>)
    return o.seq_warmup;
  else if constexpr (std::is_same_v<Part, BatchWarmup>)
    return o.batch_warmup;
  else if constexpr (std::is_same_v<Part, OptimizerConfig>)
    return o.optimizer;
  else if constexpr (std::is_same_v<Part, AdamWConfig>)
    return o.optimizer.adamw;
  else if constexpr (std::is_same_v<Part, MuonConfig>)
    return o.optimizer.muon;
  else if constexpr (std::is_same_v<Part, ComputeOptions>)
    return o.compute;
  else if constexpr (std::is_same_v<Part, EngineOptions>)
    return o.engine;
  else if constexpr (std::is_same_v<Part, EvalOptions>)
    return o.eval;
  else if constexpr (std::is_same_v<Part, SampleOptions>)
    return o.sample;
  else if constexpr (std::is_same_v<Part, CheckpointOptions>)
    return o.checkpoint;
  else if constexpr (std::is_same_v<Part, RunOptions>)
    return o.run;
  else if constexpr (std::is_same_v<Part, DivergenceOptions>)
    return o.divergence;
  else
    static_assert(sizeof(Part) == 0, "not a part of Options");
}

template <typename Part, typename T>
OptionRow row(const char* name, T Part::*field, const char* help, const char* example,
              Rule<T> rule = {}) {
  return typed<T>(
      name, [field](auto& o) -> auto& { return part_of<Part>(o).*field; }, help, example,
      std::move(rule));
}

// Model fields (model/config.h's model_fields()): validate_model() checks
// them together once all are set.
OptionRow model_row(const ModelField& f) {
  OptionRow r = std::visit(
      [&](auto field) {
        using T = std::remove_reference_t<decltype(ModelConfig{}.*field)>;
        return row<ModelConfig, T>(f.flag, field, f.help, f.example);
      },
      f.member);
  r.model_field = true;
  return r;
}

OptionRow defaults_to(OptionRow r, const char* rule) {
  r.default_help = rule;
  return r;
}

OptionRow named(OptionRow r, const char* value_name) {
  r.value_name = value_name;
  return r;
}

// A bool that is given alone on the command line (--debug), as a switch.
OptionRow bare_switch(OptionRow r) {
  r.is_switch = true;
  return r;
}

// Given several times (each a flag, or each a line of the INI file), every
// value counts, in order; the flags' values replace the file's.
OptionRow repeatable(OptionRow r) {
  r.repeatable = true;
  return r;
}

OptionRow run_control(OptionRow r) {
  r.run_control = true;
  return r;
}

std::string preset_list() {
  std::string s;
  for (const auto& n : model_preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Loads the whole preset; the model rows after it override single fields.
OptionRow preset_row() {
  OptionRow r;
  r.name = "model";
  r.value_name = "NAME";
  r.help = "model preset: " + preset_list();
  r.get = [](const Options& o) { return o.model.name; };
  r.set = [](Options& o, std::string_view text) -> std::string {
    for (const auto& n : model_preset_names())
      if (n == text) return o.model = model_preset(n), "";
    return "choose one of: " + preset_list();
  };
  r.example = "gpt-125m";
  return r;
}

// Each value is checked as it is appended, so a refusal names that one.
OptionRow prompt_row() {
  OptionRow r = run_control(repeatable(
      row("prompt", &SampleOptions::prompts,
          "start the samples from TEXT, tokenized as the data was; repeat it for several, "
          "--samples of each (none: from a fresh document)",
          "Once upon a time")));
  r.set = [append = r.set](Options& o, std::string_view text) -> std::string {
    if (text.empty())
      return "must not be empty (leave --prompt out to start from a fresh document)";
    return append(o, text);
  };
  return r;
}

std::vector<OptionRow> make_table() {
  using O = Options;
  // clang-format off
  std::vector<OptionRow> rows{preset_row()};
  for (const ModelField& f : model_fields()) rows.push_back(model_row(f));
  std::vector<OptionRow> rest = {
    named(row("train-data", &DataOptions::train_data,
              "training tokens: FILE.h5[:/dataset] (default dataset /tokens); required",
              "train.h5:/tokens2"), "FILE"),
    named(row("val-data", &DataOptions::val_data, "validation tokens: FILE.h5[:/dataset]",
              "val.h5"), "FILE"),
    row("seq-len", &DataOptions::seq_len, "tokens per sequence (0: the model's context)", "32",
        {[](const int& v, const O& o) { return v >= 0 && v <= o.model.max_seq_len; },
         "must be between 1 and the model's --max-seq-len (0 picks it)"}),
    row("batch-size", &DataOptions::batch_size,
        "sequences per rank per micro-batch (0: auto, the largest the memory plan fits, at most "
        "1024)", "3", at_least(0)),
    row("grad-accum", &DataOptions::grad_accum, "micro-batches per optimizer step", "2",
        at_least(1)),
    row("steps", &RunOptions::steps,
        "optimizer steps (sets the LR schedule); with --time-budget a cap on the count it "
        "fixes (left out or 0: none)", "50",
        {[](const int& v, const O& o) { return v >= 1 || (v == 0 && o.run.time_budget.seconds > 0); },
         "must be at least 1 (0: no cap, with --time-budget)"}),
    named(row("time-budget", &RunOptions::time_budget,
              "end within this wall-clock time (90m, 1.5h, 5400s, H:MM:SS): the run times its "
              "first warmup steps (at most 10), then fixes the step count (and so the LR "
              "schedule) that fits set-up, steps, and every validation up to the final one, "
              "leaving 1% spare; checkpoint saves and samples are not timed; the count is saved "
              "in checkpoints for resumes", "90m",
              {[](const Duration& d, const O& o) {
                 return d.seconds == 0 || o.schedule.warmup_steps >= 1;
               },
               "needs --warmup-steps of at least 1: the count is fixed after timing warmup steps, "
               "whose learning rate does not depend on it"}), "DURATION"),
    row("lr", &LrSchedule::lr, "peak learning rate", "0.003", positive()),
    defaults_to(row("min-lr", &LrSchedule::min_lr, "learning rate at the last step", "0.0002",
                    {[](const float& v, const O& o) { return v >= 0 && v <= o.schedule.lr; },
                     "must be in [0, --lr]"}),
                "a tenth of --lr"),
    row("warmup-steps", &LrSchedule::warmup_steps, "linear warmup steps", "5", at_least(0)),
    row("lr-schedule", &LrSchedule::shape,
        "after the warmup: cosine or linear to --min-lr over the remaining steps; wsd "
        "(warmup-stable-decay): --lr until the last --decay-fraction of the steps, then linear "
        "to --min-lr", "wsd"),
    row("decay-fraction", &LrSchedule::decay_fraction,
        "with --lr-schedule wsd: the share of --steps that decays", "0.1",
        {[](const float& v, const O&) { return v > 0 && v <= 1; }, "must be in (0, 1]"}),
    row("seq-warmup-steps", &SeqWarmup::steps,
        "short-to-long sequence warm-up over the first N steps (0: off): each sequence is cut "
        "into pieces of the step's context, which grows linearly from --seq-warmup-start to "
        "--seq-len (rounded down to a divisor of it); the same tokens a step, each piece "
        "attending only within itself",
        "200", at_least(0)),
    defaults_to(
        row("seq-warmup-start", &SeqWarmup::start,
            "the context of the sequence warm-up's first steps; must divide --seq-len",
            "8",
            {[](const int& v, const O& o) {
               const int T = o.data.seq_len > 0 ? o.data.seq_len : o.model.max_seq_len;
               return v >= 0 && seq_warmup_rule(o.seq_warmup, T).empty();
             },
             "must be 0 or divide --seq-len and be below it (with --seq-warmup-steps; 0: "
             "--seq-len / 8, which must then divide it)"}),
        "0: --seq-len / 8"),
    row("batch-warmup-steps", &BatchWarmup::steps,
        "small-to-large batch warm-up over the first N steps (0: off): a step runs fewer of its "
        "--grad-accum micro-batches, their number growing linearly from --batch-warmup-start to "
        "--grad-accum; the data order is kept, the learning-rate schedule stays by step",
        "200", at_least(0)),
    defaults_to(
        row("batch-warmup-start", &BatchWarmup::start,
            "the micro-batches of the batch warm-up's first steps; below --grad-accum", "1",
            {[](const int& v, const O& o) {
               return v >= 0 && batch_warmup_rule(o.batch_warmup, o.data.grad_accum).empty();
             },
             "must be 0 or at least 1 and below --grad-accum (with --batch-warmup-steps; 0: 1, "
             "so --grad-accum must then be at least 2: raise it, with a smaller --batch-size for "
             "the same global batch)"}),
        "0: 1"),
    row("optimizer", &OptimizerConfig::kind,
        "adamw: AdamW for every parameter; muon: Muon for the block matrices (Wq, Wk, Wv, Wo, "
        "W1, W3, W2, each whole, orthogonalised on one rank of the shard group), AdamW for "
        "embeddings, head and norm gains, with the same --lr, --weight-decay and --grad-clip "
        "(Newton-Schulz in fp32 on the CPU, in bf16 on a GPU)", "muon"),
    row("weight-decay", &AdamWConfig::weight_decay,
        "decoupled weight decay of the matrices (AdamW's and Muon's)", "0.05", at_least(0.0f)),
    row("beta1", &AdamWConfig::beta1, "AdamW beta1", "0.8", fraction()),
    row("beta2", &AdamWConfig::beta2, "AdamW beta2", "0.99", fraction()),
    row("adam-eps", &AdamWConfig::eps, "AdamW epsilon", "1e-06", positive()),
    row("grad-clip", &AdamWConfig::grad_clip, "clip the global gradient norm (0: off)", "0.5",
        {[](const float& v, const O&) { return v >= 0; }, "must be >= 0 (0 turns clipping off)"}),
    row("muon-momentum", &MuonConfig::momentum, "Muon's momentum", "0.9", fraction()),
    row("muon-nesterov", &MuonConfig::nesterov,
        "Muon steps along g + momentum (buffer - g) (false: along the buffer)", "false"),
    row("muon-ns-steps", &MuonConfig::ns_steps,
        "Newton-Schulz steps on the update over its Frobenius norm", "6", at_least(1)),
    named(row("muon-ns-coefficients", &MuonConfig::ns_coefficients,
        "Newton-Schulz's quintics: jordan, (3.4445, -4.7750, 2.0315) every step (Keller "
        "Jordan's Muon); polar_express, one tuned per step (Amsel et al. 2025), closer to "
        "orthogonal in as many steps",
        "polar_express",
        {[](const MuonNsCoefficients& v, const O& o) {
           return v != MuonNsCoefficients::polar_express ||
                  o.optimizer.muon.ns_steps >= kPolarExpressSteps;
         },
         "needs --muon-ns-steps 5 or more: its table is tuned for 5 steps, and fewer leave the "
         "update far from orthogonal"}), "TABLE"),
    row("muon-normuon", &MuonConfig::normuon,
        "NorMuon (Li et al. 2025): each output row of Muon's orthogonalised update divided by "
        "the root of its running mean square, then the update rescaled to its Frobenius norm "
        "(the state lies in optim/exp_avg_sq)", "true"),
    row("muon-normuon-beta2", &MuonConfig::normuon_beta2,
        "with --muon-normuon: the decay of each row's running mean square", "0.9", fraction()),
    named(row("muon-lr-adjust", &MuonConfig::lr_adjust,
              "scale of Muon's update for a rows x cols matrix: match_rms_adamw 0.2 "
              "sqrt(max(rows, cols)), AdamW's update RMS, so --lr carries over; original "
              "sqrt(max(1, rows/cols))", "original"), "RULE"),
    row("seed", &RunOptions::seed, "seed for initialisation and data order", "42"),
    row("device", &ComputeOptions::device, "auto uses the GPU when one is visible, else the CPU",
        "cpu"),
    row("precision", &ComputeOptions::precision,
        "auto: fp32 on cpu, bf16 on cuda; fp8: the block GEMMs on FP8 (e4m3) codes with "
        "per-tensor scaling, their weights all-gathered as those codes (1 byte per "
        "element; one scale per weight agreed across the shard group), emulated on cpu; on "
        "an H100 within 1% of bf16's loss; its speed against bf16 is in README's status",
        "fp32"),
    run_control(bare_switch(row("debug", &RunOptions::debug,
                    "stop at the first unit whose output or gradient holds NaN/Inf; on a GPU "
                    "also deterministic attention and a sync after every op", "true"))),
    run_control(bare_switch(row("profile-ops", &RunOptions::profile_ops,
                    "time every op on the device (stream-ordered marks) from the second step "
                    "of this run and print a table per op and shape at the end", "true"))),
    row("shard-group-size", &ComputeOptions::shard_group_size,
        "shard within groups of K ranks, replicate across groups (0: the ranks of a node "
        "when there are several nodes, else all ranks)", "2",
        at_least(0)),
    row("reshard-after-forward", &EngineOptions::reshard_after_forward,
        "free gathered weights after forward, re-gather for backward", "false"),
    run_control(row("single-rank-direct", &EngineOptions::direct_when_unsharded,
                    "with a shard group of one rank, compute in the shards in place instead of "
                    "through gather and reduce-scatter (false: the full FSDP path, to measure "
                    "its cost)", "false")),
    run_control(row("fp8-gather", &EngineOptions::fp8_gather,
                    "with --precision fp8, all-gather the block linears as their e4m3 codes "
                    "(false: gather them in the compute dtype and cast before each GEMM, "
                    "twice the bytes, to measure the difference; on the CPU the same codes, on "
                    "a GPU cast from the bf16 copy instead of the fp32 master); no effect "
                    "without fp8", "false")),
    row("recompute", &ComputeOptions::recompute,
        "activation recomputation in backward (less memory, more compute)", "block"),
    row("reduce-dtype", &EngineOptions::reduce_dtype,
        "element type of gradient reduce-scatters (bf16 needs --device cuda)", "bf16"),
    row("device-comm", &ComputeOptions::device_comm,
        "auto: NCCL on cuda, MPI on cpu; staged: a TEST MODE that runs the engine's "
        "collectives through host memory over MPI, so several ranks can share one GPU (slow)",
        "staged"),
    row("eval-every", &EvalOptions::every, "validate every N steps (0: at the end only)", "10",
        at_least(0)),
    row("eval-batches", &EvalOptions::batches,
        "validation micro-batches per rank (0: the whole split, each window once)", "4",
        at_least(0)),
    row("eval-seq-len", &EvalOptions::seq_len,
        "validate at context N (0: --seq-len's), in micro-batches of the training one's tokens: "
        "--batch-size x --seq-len / N sequences, at least one",
        "64",
        {[](const int& v, const O& o) { return v >= 0 && v <= o.model.max_seq_len; },
         "must be between 1 and the model's --max-seq-len (0: --seq-len's)"}),
    run_control(bare_switch(row("eval-only", &EvalOptions::only,
                    "evaluate --val-data with the weights of --resume (or the initial ones) "
                    "and exit: no training, nothing saved; --train-data may be left out",
                    "true"))),
    run_control(defaults_to(row("samples", &SampleOptions::count,
                                "print N text samples (of each --prompt) at the end of training, "
                                "every --sample-every steps, and after --eval-only (N over "
                                "--batch-size takes more rounds)",
                                "3", at_least(0)),
                            "0; 1 with --prompt")),
    prompt_row(),
    run_control(row("sample-length", &SampleOptions::length, "new tokens per sample", "100",
                    at_least(1))),
    run_control(row("sample-every", &SampleOptions::every,
                    "steps between samples during training (0: at the end only)", "500",
                    at_least(0))),
    run_control(row("temperature", &SampleOptions::temperature,
                    "sampling temperature (0: greedy, the most likely token)", "0.8",
                    {[](const float& v, const O&) { return v >= 0; }, "must be >= 0 (0: greedy)"})),
    run_control(row("top-k", &SampleOptions::top_k,
                    "sample among the K most likely tokens (0: all)", "8", at_least(0))),
    row("on-divergence", &DivergenceOptions::action,
        "a diverged step (non-finite loss or gradient norm, or a loss spike) is never applied; "
        "stop: the run ends there; rollback: every rank goes back to the newest checkpoint in "
        "--checkpoint-dir, skips the data from there up to and including the bad step, and "
        "trains on (a fresh run saves step 0 first, to have one)", "rollback"),
    row("spike-factor", &DivergenceOptions::spike_factor,
        "a step whose loss is above F times the median of the last --spike-window steps "
        "diverged (0: only non-finite values do); healthy runs stay below 1.3", "1.5",
        // at or below 1, about half of a healthy run's steps are above the median
        {[](const float& v, const O&) { return v == 0 || v > 1; },
         "must be 0 (off) or above 1: at 1 or below, healthy steps count as diverged"}),
    row("spike-window", &DivergenceOptions::spike_window,
        "applied steps whose median loss --spike-factor compares with; the test starts once "
        "there are this many (at most 4096: checkpoints keep the window)", "16",
        between(1, 4096)),
    row("max-rollbacks", &DivergenceOptions::max_rollbacks,
        "with --on-divergence rollback: how many times a run (with its resumes) may roll "
        "back; the next diverged step stops it", "5",
        between(0, 1000)),
    row("log-every", &RunOptions::log_every, "print a line every N steps", "5", at_least(1)),
    run_control(named(row("metrics", &RunOptions::metrics,
                          "write JSON-lines metrics to FILE (rank 0); a fresh run starts it "
                          "anew, a resumed run or --eval-only appends",
                          "m.jsonl"), "FILE")),
    run_control(named(row("checkpoint-dir", &CheckpointOptions::dir, "directory for checkpoints",
                          "ckpt"), "DIR")),
    row("checkpoint-every", &CheckpointOptions::every, "save every N steps (and at the end)", "10",
        at_least(0)),
    row("keep-checkpoints", &CheckpointOptions::keep, "keep the newest K checkpoints (0: all)", "2",
        at_least(0)),
    run_control(bare_switch(row("async-checkpoint", &CheckpointOptions::async,
                    "write checkpoints on a thread of their own while training goes on: a save "
                    "costs the step only a copy of the rank's shards to host memory; at most one "
                    "save is in flight, and the run waits for the last one before it ends", "true",
                    {[](const bool& v, const O& o) { return !v || !o.checkpoint.dir.empty(); },
                     "needs --checkpoint-dir"}))),
    run_control(named(row("resume", &CheckpointOptions::resume,
                          "auto: the newest valid checkpoint in --checkpoint-dir, or a fresh start; "
                          "or a checkpoint file",
                          "auto"), "auto|PATH")),
    run_control(bare_switch(row("reset-optimizer", &CheckpointOptions::reset_optimizer,
                    "with --resume: take the checkpoint's weights and data position but start "
                    "the optimizer state afresh (moments and momentum zero, step count 0); "
                    "needed to switch --optimizer between adamw and muon", "true",
                    {[](const bool& v, const O& o) { return !v || !o.checkpoint.resume.empty(); },
                     "needs --resume (it resets the state a checkpoint brings)"}))),
    run_control(named(row("init-from", &CheckpointOptions::init_from,
                          "start from this checkpoint's weights alone (any fsdptrain checkpoint, "
                          "saved on any rank count, or one tools/import_hf.py wrote): optimizer "
                          "state, step, schedule and data order start afresh; with --resume "
                          "auto, only while --checkpoint-dir holds no checkpoint yet",
                          "hf/model.h5"), "PATH")),
    run_control(row("stop-at-step", &RunOptions::stop_at_step,
                    "end after step N with a checkpoint, as a preemption would; the LR schedule "
                    "still follows --steps (or the count --time-budget fixes) (0: off)", "20",
                    {[](const int& v, const O& o) {
                       return v >= 0 && (o.run.steps == 0 || v <= o.run.steps);
                     },
                     "must be between 1 and --steps (0: off)"})),
  };
  // clang-format on
  rows.insert(rows.end(), std::make_move_iterator(rest.begin()),
              std::make_move_iterator(rest.end()));
  return rows;
}

}  // namespace

const std::vector<OptionRow>& option_table() {
  static const std::vector<OptionRow> table = make_table();
  return table;
}

const OptionRow* find_option(std::string_view name) {
  for (const auto& r : option_table())
    if (r.name == name) return &r;
  return nullptr;
}

}  // namespace fsdp
