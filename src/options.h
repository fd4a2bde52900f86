// Everything a run is told, from flags and an INI file (--config FILE; flags
// win). One table (src/option_table.h) names every option once; values are
// converted and checked there, before any data or device is touched.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "src/option_enums.h"

namespace fsdp {

struct Options {
  ModelConfig model;

  std::string train_data, val_data;  // "file.h5" or "file.h5:/dataset"
  int seq_len = 0;                   // 0: the model's max_seq_len
  int batch_size = 8;                // sequences per rank per micro-batch
  int grad_accum = 1;
  int steps = 100;
  float lr = 1e-3f, min_lr = 1e-4f;
  int warmup_steps = 10;
  float weight_decay = 0.1f, beta1 = 0.9f, beta2 = 0.95f, adam_eps = 1e-8f;
  float grad_clip = 1.0f;
  uint64_t seed = 1337;

  Device device = Device::automatic;
  Precision precision = Precision::automatic;
  bool debug = false;
  bool profile_ops = false;  // time every op; table at the end (model/op_profiler.h)
  int shard_group_size = 0;  // 0: all ranks
  bool reshard_after_forward = true;
  bool single_rank_direct = true;  // EngineOptions::direct_when_unsharded
  bool fp8_gather = true;          // EngineOptions::fp8_gather
  Recompute recompute = Recompute::none;
  DType reduce_dtype = DType::f32;  // gradient reduce-scatter
  DeviceComm device_comm = DeviceComm::automatic;

  int eval_every = 0;    // 0: only at the end
  int eval_batches = 8;  // 0: the whole split once
  bool eval_only = false;
  int samples = 0;  // text samples to print (0: none)
  int sample_length = 64;
  int sample_every = 0;  // 0: at the end only
  float temperature = 1.0f;
  int top_k = 40;
  int log_every = 1;
  std::string metrics;  // JSON-lines file, rank 0

  std::string checkpoint_dir;
  int checkpoint_every = 0;
  int keep_checkpoints = 0;  // 0: keep all
  std::string resume;        // "", "auto" or a file
  int stop_at_step = 0;      // 0: run to --steps

  bool operator==(const Options&) const = default;
};

// A value as given, and where: flags win over the INI file, and a message
// about a value from the file names the file.
struct GivenValue {
  std::string text;
  std::string where;  // "" for a flag, else "--config 'FILE': "
};
// Converts and checks the given values (option name -> value) as fsdptrain
// does, without the rules a training run adds (--train-data required, ...):
// tools that plan a run from its flags read them the same way.
Options options_from_values(const std::map<std::string, GivenValue>& given);

// Returns nullopt after printing --help. Throws fsdp::Error for a bad flag,
// value or config file.
std::optional<Options> parse_options(int argc, const char* const argv[]);
std::string options_help();
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
