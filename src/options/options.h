// Everything a run is told, from flags and an INI file (--config FILE; flags
// win). One table (src/options/option_table.h) names every option once; values are
// converted and checked there, before any data or device is touched.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/data_options.h"
#include "model/config.h"
#include "shard/engine_options.h"
#include "shard/optimizer_config.h"
#include "src/options/option_enums.h"
#include "src/options/option_values.h"
#include "src/policy/batch_warmup.h"
#include "src/policy/divergence.h"
#include "src/policy/lr_schedule.h"
#include "src/policy/seq_warmup.h"

namespace fsdp {

// The options in parts, one per component that reads them; each part is
// the struct that component takes, so a default is written once, where the
// component is. The option table (src/options/option_table.cpp) maps every flag to
// its field here.

// Where and how the model computes: the backend (src/trainer/backend.h), its number
// formats and recomputation, and how the ranks split into shard groups.
struct ComputeOptions {
  Device device = Device::automatic;
  Precision precision = Precision::automatic;
  Recompute recompute = Recompute::none;
  DeviceComm device_comm = DeviceComm::automatic;
  int shard_group_size = 0;  // 0: all ranks (resolve_shard_group_size)

  bool fp8() const { return precision == Precision::fp8; }
  bool operator==(const ComputeOptions&) const = default;
};

struct EvalOptions {
  int every = 0;    // 0: only at the end
  int batches = 8;  // 0: the whole split once
  int seq_len = 0;  // validation context (0: --seq-len's)
  bool only = false;

  // The validation context, given the training one.
  int context(int train_seq_len) const { return seq_len > 0 ? seq_len : train_seq_len; }
  // Sequences per validation micro-batch: as many of the validation context
  // as the training micro-batch has tokens for, so validation needs no memory
  // of its own (0: not one fits).
  int micro_batch(int train_batch, int train_seq_len) const {
    return int(int64_t(train_batch) * train_seq_len / context(train_seq_len));
  }

  bool operator==(const EvalOptions&) const = default;
};

struct SampleOptions {
  int count = 0;                     // text samples to print (0: none), of each prompt
  std::vector<std::string> prompts;  // --prompt: texts samples start from
  int length = 64;
  int every = 0;  // 0: at the end only
  float temperature = 1.0f;
  int top_k = 40;

  bool operator==(const SampleOptions&) const = default;
};

struct CheckpointOptions {
  std::string dir;
  int every = 0;
  int keep = 0;                  // 0: keep all
  std::string resume;            // "", "auto" or a file
  bool reset_optimizer = false;  // resume the weights with fresh optimizer state
  std::string init_from;         // weights only, where --resume brings none
  bool async = false;            // saves written on their own thread (checkpoint/background_save.h)

  bool operator==(const CheckpointOptions&) const = default;
};

// The run as a whole: its length, seed, logging and the switches that steer it.
struct RunOptions {
  int steps = 100;       // also the LR schedule's length; with a time budget a cap (0: none)
  Duration time_budget;  // zero: off; the plan is src/policy/time_budget.h's
  uint64_t seed = 1337;
  bool debug = false;
  bool profile_ops = false;  // time every op; table at the end (model/op_profiler.h)
  int log_every = 1;
  std::string metrics;   // JSON-lines file, rank 0
  int stop_at_step = 0;  // 0: run to --steps

  bool operator==(const RunOptions&) const = default;
};

struct Options {
  ModelConfig model;          // model/config.h
  DataOptions data;           // data/data_options.h
  LrSchedule schedule;        // src/policy/lr_schedule.h
  SeqWarmup seq_warmup;       // src/policy/seq_warmup.h: short contexts first
  BatchWarmup batch_warmup;   // src/policy/batch_warmup.h: small batches first
  OptimizerConfig optimizer;  // shard/optimizer_config.h: the kind, AdamW's and Muon's settings
  ComputeOptions compute;
  EngineOptions engine;  // shard/engine_options.h; check_finite and seed come from run
  EvalOptions eval;
  SampleOptions sample;
  CheckpointOptions checkpoint;
  RunOptions run;
  DivergenceOptions divergence;  // src/policy/divergence.h: what a diverged step is, and what then

  bool operator==(const Options&) const = default;
};

// A value as given, and where: flags win over the INI file, and a message
// about a value from the file names the file.
struct GivenValue {
  std::string text;
  std::string where;  // "" for a flag, else "--config 'FILE': "
  // A repeatable option's values, in order (text: the last); empty otherwise.
  std::vector<std::string> texts = {};
};
// Converts and checks the given values (option name -> value) as fsdptrain
// does, without the rules a training run adds (--train-data required, ...):
// tools that plan a run from its flags read them the same way.
Options options_from_values(const std::map<std::string, GivenValue>& given);

// Returns nullopt after printing --help. Throws fsdp::Error for a bad flag,
// value or config file.
std::optional<Options> parse_options(int argc, const char* const argv[]);
std::string options_help();
// docs/OPTIONS.md: every option of the table as Markdown (tools/options_doc.cpp
// prints it; CTest options_reference holds the committed file to it).
std::string options_reference();
// Throws unless a validation micro-batch (--eval-seq-len) fits in the tokens
// of a training micro-batch of `batch` sequences: parsing checks a given
// --batch-size, the trainer the one --batch-size 0 picks.
void check_eval_micro_batch(const Options& o, int batch);
// What options_to_ini prints: the checkpoint's copy leaves out the options
// that steer one run (where it writes, resumes or stops, --debug), since a run
// started from that copy should not inherit them.
enum class IniScope { configuration, everything };
// The options as INI text that --config reads back; every value is printed so
// that it parses back to the same Options.
std::string options_to_ini(const Options& o, IniScope scope = IniScope::configuration);
// options_to_ini's text back as name -> value text, unchecked: what a
// checkpoint's run was given, to compare with this run's (a key this build
// does not know is kept; the caller skips it).
std::map<std::string, std::string> ini_to_values(const std::string& ini);

}  // namespace fsdp
