#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "src/options/option_table.h"
#include "src/options/options.h"
#include "src/policy/lr_schedule.h"

namespace fsdp {
namespace {

std::optional<Options> parse(std::vector<std::string> args) {
  args.insert(args.begin(), "fsdptrain");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_options(int(argv.size()), argv.data());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Options, DefaultsAndPreset) {
  auto o = parse({"--train-data", "x.h5"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->model.name, "tiny");
  EXPECT_EQ(o->data.seq_len, o->model.max_seq_len);  // 0 means the model's context
  EXPECT_TRUE(o->engine.reshard_after_forward);
  EXPECT_EQ(o->compute.device, Device::automatic);
  EXPECT_EQ(o->compute.precision, Precision::automatic);
  EXPECT_EQ(o->compute.recompute, Recompute::none);
  EXPECT_EQ(o->engine.reduce_dtype, DType::f32);
  EXPECT_EQ(o->compute.device_comm, DeviceComm::automatic);
  // Parts no flag touches come out as their components build them: parsing
  // fills only what was given (the defaults live in those structs alone).
  EXPECT_EQ(o->optimizer, OptimizerConfig{});
  EXPECT_EQ(o->schedule, LrSchedule{});
  EXPECT_EQ(o->engine, EngineOptions{});
}

// The parts are what the components take, as they are: the flags land in the
// engine's, the optimizer's and the schedule's own structs.
TEST(Options, FlagsFillTheComponentsParts) {
  auto o = parse({"--train-data",
                  "x.h5",
                  "--beta2",
                  "0.99",
                  "--adam-eps",
                  "1e-06",
                  "--grad-clip",
                  "0",
                  "--weight-decay",
                  "0",
                  "--single-rank-direct",
                  "false",
                  "--fp8-gather",
                  "false",
                  "--warmup-steps",
                  "0",
                  "--min-lr",
                  "0",
                  "--optimizer",
                  "muon",
                  "--muon-momentum",
                  "0.9",
                  "--muon-nesterov",
                  "false",
                  "--muon-ns-steps",
                  "6",
                  "--muon-lr-adjust",
                  "original",
                  "--muon-ns-coefficients",
                  "polar_express",
                  "--muon-normuon",
                  "true",
                  "--muon-normuon-beta2",
                  "0.9"});
  ASSERT_TRUE(o);
  OptimizerConfig opt;
  opt.kind = OptimizerKind::muon;
  opt.adamw.beta2 = 0.99f, opt.adamw.eps = 1e-6f, opt.adamw.grad_clip = 0;
  opt.adamw.weight_decay = 0;
  opt.muon = {.momentum = 0.9f,
              .nesterov = false,
              .ns_steps = 6,
              .lr_adjust = MuonLrAdjust::original,
              .ns_coefficients = MuonNsCoefficients::polar_express,
              .normuon = true,
              .normuon_beta2 = 0.9f};
  EXPECT_EQ(o->optimizer, opt);
  EngineOptions engine;
  engine.direct_when_unsharded = false, engine.fp8_gather = false;
  EXPECT_EQ(o->engine, engine);
  EXPECT_EQ(o->schedule, (LrSchedule{.lr = 1e-3f, .min_lr = 0, .warmup_steps = 0}));
  EXPECT_FLOAT_EQ(lr_at(0, o->run.steps, o->schedule), 1e-3f);  // no warmup: the peak
}

// The one place the tokens of a step are counted.
TEST(Options, TokensPerStepCountsEveryRanksMicroBatches) {
  auto o =
      parse({"--train-data", "x.h5", "--batch-size", "3", "--grad-accum", "2", "--seq-len", "32"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->data.sequences_per_step(4), 3 * 2 * 4);
  EXPECT_EQ(o->data.tokens_per_step(4), 3 * 2 * 4 * 32);
}

TEST(Options, ChoicesBecomeEnumsOnce) {
  auto o = parse({"--train-data", "x.h5", "--device", "cuda", "--precision", "fp8", "--recompute",
                  "mlp", "--reduce-dtype", "bf16", "--device-comm", "staged"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->compute.device, Device::cuda);
  EXPECT_EQ(o->compute.precision, Precision::fp8);
  EXPECT_EQ(o->compute.recompute, Recompute::mlp);
  EXPECT_EQ(o->engine.reduce_dtype, DType::bf16);
  EXPECT_EQ(o->compute.device_comm, DeviceComm::staged);
  // The names come back for the INI copy.
  const std::string ini = options_to_ini(*o);
  for (const char* line : {"device = cuda\n", "precision = fp8\n", "recompute = mlp\n",
                           "reduce-dtype = bf16\n", "device-comm = staged\n"})
    EXPECT_NE(ini.find(line), std::string::npos) << line;
}

TEST(Options, ModelFieldsOverrideThePreset) {
  auto o = parse({"--train-data", "x.h5", "--model", "gpt-350m", "--n-layer", "4",
                  "--tie-embeddings", "false", "--seq-len", "256"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->model.n_layer, 4);
  EXPECT_EQ(o->model.d_model, 1024);  // untouched fields keep the preset's
  EXPECT_FALSE(o->model.tie_embeddings);
  EXPECT_EQ(o->data.seq_len, 256);
}

TEST(Options, ConfigFileWithFlagsWinning) {
  const std::string path = ::testing::TempDir() + "/fsdp_options.ini";
  std::ofstream(path) << "# comment\nlr = 0.01\nsteps = 7\nmodel = gpt-125m\nd-model = 512\n"
                         "reshard-after-forward = false\n";
  auto o = parse({"--config", path, "--train-data", "x.h5", "--steps", "9", "--n-head", "8"});
  ASSERT_TRUE(o);
  EXPECT_FLOAT_EQ(o->schedule.lr, 0.01f);
  EXPECT_EQ(o->run.steps, 9);  // the flag beats the file
  EXPECT_EQ(o->model.name, "gpt-125m");
  EXPECT_EQ(o->model.d_model, 512);
  EXPECT_EQ(o->model.n_head, 8);
  EXPECT_FALSE(o->engine.reshard_after_forward);
  std::remove(path.c_str());
}

// Issue 65: README's fine-tuning command (--lr 3e-5, no --min-lr) was refused,
// the fixed default 1e-4 being above it. --min-lr now follows --lr.
TEST(Options, MinLrDefaultsToATenthOfLr) {
  auto o = parse({"--train-data", "x"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->schedule.min_lr, 1e-4f);  // the default --lr's, bit for bit as before
  o = parse({"--train-data", "x", "--lr", "3e-5"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->schedule.min_lr, 3e-6f);
  o = parse({"--train-data", "x", "--lr", "3e-5", "--min-lr", "0"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->schedule.min_lr, 0.0f);
  // a value given keeps its rule
  const std::string e = error_of({"--train-data", "x", "--lr", "3e-5", "--min-lr", "1e-4"});
  EXPECT_NE(e.find("--min-lr"), std::string::npos) << e;
  // from a --config file too
  const std::string path = ::testing::TempDir() + "/min_lr.ini";
  { std::ofstream(path) << "lr = 0.002\n"; }
  o = parse({"--train-data", "x", "--config", path});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->schedule.min_lr, 2e-4f);
  std::remove(path.c_str());
  EXPECT_NE(options_help().find("a tenth of --lr"), std::string::npos);
}

// Issue 65: --spike-factor 1 or below called healthy steps diverged.
TEST(Options, SpikeFactorIsOffOrAboveOne) {
  for (const char* bad : {"1", "0.5", "-1"}) {
    const std::string e = error_of({"--train-data", "x", "--spike-factor", bad});
    EXPECT_NE(e.find("--spike-factor"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("above 1"), std::string::npos) << bad << ": " << e;
  }
  EXPECT_EQ(error_of({"--train-data", "x", "--spike-factor", "0"}), "");
  EXPECT_EQ(error_of({"--train-data", "x", "--spike-factor", "1.01"}), "");
}

TEST(Options, BadValuesNameTheFlag) {
  EXPECT_NE(error_of({"--train-data", "x", "--lr", "0"}).find("--lr"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--min-lr", "1"}).find("--min-lr"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--grad-accum", "0"}).find("--grad-accum"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--precision", "fp16"}).find("fp16"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--seq-len", "65"}).find("--seq-len"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--d-model", "63"}).find("--n-head"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--steps", "many"}).find("many"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--no-such-flag"}).find("no-such-flag"),
            std::string::npos);
  EXPECT_NE(error_of({}).find("--train-data"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--config", "/no/such.ini"}).find("/no/such.ini"),
            std::string::npos);
  // Issue 33's flags.
  EXPECT_NE(error_of({"--train-data", "x", "--optimizer", "sgd"}).find("sgd"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--decay-fraction", "0"}).find("--decay-fraction"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--muon-momentum", "1"}).find("--muon-momentum"),
            std::string::npos);
  EXPECT_NE(
      error_of({"--train-data", "x", "--muon-normuon-beta2", "1"}).find("--muon-normuon-beta2"),
      std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--reset-optimizer"}).find("needs --resume"),
            std::string::npos);
  // Polar Express's table is tuned for 5 steps; fewer are refused, more repeat its last.
  for (const char* steps : {"1", "4"})
    EXPECT_NE(error_of({"--train-data", "x", "--muon-ns-coefficients", "polar_express",
                        "--muon-ns-steps", steps})
                  .find("--muon-ns-coefficients: 'polar_express' is invalid: needs "
                        "--muon-ns-steps 5 or more"),
              std::string::npos)
        << steps;
  EXPECT_EQ(error_of({"--train-data", "x", "--muon-ns-coefficients", "polar_express"}), "");
  EXPECT_EQ(error_of({"--train-data", "x", "--muon-ns-coefficients", "polar_express",
                      "--muon-ns-steps", "7"}),
            "");
  EXPECT_EQ(
      error_of({"--train-data", "x", "--muon-ns-coefficients", "jordan", "--muon-ns-steps", "1"}),
      "");
  EXPECT_EQ(error_of({"--train-data", "x", "--reset-optimizer", "--resume", "auto",
                      "--checkpoint-dir", "ck"}),
            "");
  // --eval-seq-len: within the model's context, with validation data, and in
  // a micro-batch of at least that many tokens (the tiny model's 8 x 32 by
  // default; --batch-size 0 is checked once the trainer picks it).
  const std::vector<std::string> val = {"--train-data", "x", "--val-data", "v"};
  auto with_val = [&](std::vector<std::string> more) {
    more.insert(more.begin(), val.begin(), val.end());
    return error_of(more);
  };
  EXPECT_NE(error_of({"--train-data", "x", "--eval-seq-len", "64"}).find("needs --val-data"),
            std::string::npos);
  EXPECT_NE(with_val({"--eval-seq-len", "65"}).find("--max-seq-len"), std::string::npos);
  EXPECT_NE(with_val({"--seq-len", "16", "--batch-size", "3", "--eval-seq-len", "64"})
                .find("raise --batch-size to 4"),
            std::string::npos);
  EXPECT_EQ(with_val({"--seq-len", "16", "--batch-size", "4", "--eval-seq-len", "64"}), "");
  EXPECT_EQ(with_val({"--seq-len", "16", "--batch-size", "0", "--eval-seq-len", "64"}), "");
  // --seq-warmup-steps: its first context divides --seq-len (given, or the
  // model's context) and is below it; 0 is an eighth of it.
  const std::vector<std::string> warm = {"--train-data", "x", "--seq-warmup-steps", "50"};
  auto warming = [&](std::vector<std::string> more) {
    more.insert(more.begin(), warm.begin(), warm.end());
    return error_of(more);
  };
  EXPECT_EQ(warming({}), "");  // tiny's 64: 8
  EXPECT_EQ(warming({"--seq-len", "24", "--seq-warmup-start", "6"}), "");
  EXPECT_EQ(warming({"--seq-len", "24"}), "");  // 3
  EXPECT_NE(warming({"--seq-len", "28"}).find("--seq-warmup-start: '0' is invalid"),
            std::string::npos);  // 3 does not divide 28
  EXPECT_NE(warming({"--seq-len", "4"}).find("--seq-warmup-start: '0' is invalid"),
            std::string::npos);  // 0
  EXPECT_NE(warming({"--seq-warmup-start", "5"}).find("--seq-warmup-start: '5' is invalid"),
            std::string::npos);
  EXPECT_NE(warming({"--seq-warmup-start", "64"}).find("--seq-warmup-start: '64' is invalid"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--seq-warmup-steps", "-1"}).find("must be >= 0"),
            std::string::npos);
  EXPECT_EQ(error_of({"--train-data", "x", "--seq-warmup-start", "5"}), "");  // no warm-up
  // --batch-warmup-steps: it starts with at least one micro-batch and fewer
  // than --grad-accum (0: one, so --grad-accum must be at least 2).
  auto ramping = [&](std::vector<std::string> more) {
    more.insert(more.begin(), {"--train-data", "x", "--batch-warmup-steps", "50"});
    return error_of(more);
  };
  EXPECT_NE(ramping({}).find("--batch-warmup-start: '0' is invalid"), std::string::npos);
  EXPECT_EQ(ramping({"--grad-accum", "2"}), "");
  EXPECT_EQ(ramping({"--grad-accum", "8", "--batch-warmup-start", "7"}), "");
  EXPECT_NE(ramping({"--grad-accum", "8", "--batch-warmup-start", "8"})
                .find("--batch-warmup-start: '8' is invalid: must be 0 or at least 1 and below "
                      "--grad-accum"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--batch-warmup-steps", "-1"}).find("must be >= 0"),
            std::string::npos);
  EXPECT_EQ(error_of({"--train-data", "x", "--batch-warmup-start", "9"}), "");  // no warm-up
}

TEST(Options, ValidationMicroBatchKeepsTheTrainingTokens) {
  EvalOptions e;
  EXPECT_EQ(e.context(32), 32);  // 0: training's context
  EXPECT_EQ(e.micro_batch(8, 32), 8);
  e.seq_len = 64;
  EXPECT_EQ(e.context(32), 64);
  EXPECT_EQ(e.micro_batch(8, 32), 4);
  EXPECT_EQ(e.micro_batch(5, 32), 2);  // 160 tokens: two sequences of 64
  EXPECT_EQ(e.micro_batch(1, 32), 0);  // not one
  e.seq_len = 16;
  EXPECT_EQ(e.micro_batch(8, 32), 16);
}

TEST(Options, EveryRealMustBeFinite) {
  int reals = 0;
  for (const auto& row : option_table()) {
    if (row.kind != OptionKind::real) continue;
    ++reals;
    for (const char* bad : {"inf", "-inf", "nan", "1e39"}) {
      const std::string e = error_of({"--train-data", "x.h5", "--" + row.name, bad});
      EXPECT_NE(e.find("--" + row.name + ": '" + bad + "'"), std::string::npos) << e;
    }
  }
  EXPECT_GE(reals, 10);  // lr, min-lr, betas, ... and the model's rope-theta, norm-eps, init-std
}

TEST(Options, ValuesFromTheIniFileAreCheckedAndNameIt) {
  const std::string path = ::testing::TempDir() + "/fsdp_inf.ini";
  std::ofstream(path) << "lr = inf\n";
  const std::string e = error_of({"--train-data", "x.h5", "--config", path});
  EXPECT_NE(e.find(path), std::string::npos) << e;
  EXPECT_NE(e.find("--lr: 'inf'"), std::string::npos) << e;
  std::remove(path.c_str());
}

TEST(Options, TextThatIsNotTheValueIsRefused) {
  EXPECT_NE(error_of({"--train-data", "x", "--steps", "8.5"}).find("'8.5'"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--seed", "-1"}).find("--seed"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--steps", "99999999999"}).find("--steps"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--lr", "0.1x"}).find("'0.1x'"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--tie-embeddings", "maybe"}).find("maybe"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--model", "gpt-7b"}).find("gpt-350m"),
            std::string::npos);
  // A stray word is not silently dropped.
  EXPECT_NE(error_of({"--train-data", "x", "0.01"}).find("'0.01'"), std::string::npos);
}

TEST(Options, ConfigThatIsNotAnOptionFileIsRefused) {
  const std::string dir = ::testing::TempDir();
  const std::string e = error_of({"--train-data", "x", "--config", dir});
  EXPECT_NE(e.find(dir), std::string::npos) << e;
  EXPECT_NE(e.find("directory"), std::string::npos) << e;

  const std::string unknown = dir + "/fsdp_unknown.ini";
  std::ofstream(unknown) << "lr = 0.01\nlearning-rate = 0.02\n";
  const std::string e2 = error_of({"--train-data", "x", "--config", unknown});
  EXPECT_NE(e2.find(unknown), std::string::npos) << e2;
  EXPECT_NE(e2.find("learning-rate"), std::string::npos) << e2;

  // --config and --help are flags only: a file naming another file would be ignored.
  const std::string nested = dir + "/fsdp_nested.ini";
  std::ofstream(nested) << "config = " << unknown << "\n";
  EXPECT_NE(error_of({"--train-data", "x", "--config", nested}).find("'config'"),
            std::string::npos);
  std::remove(unknown.c_str());
  std::remove(nested.c_str());
}

// Every row set to its example, as flags.
std::vector<std::string> example_flags(const std::string& except = "") {
  std::vector<std::string> args;
  for (const auto& row : option_table()) {
    if (row.name == except) continue;
    args.push_back("--" + row.name);
    if (!row.is_switch) args.push_back(row.example);
  }
  return args;
}

TEST(OptionTable, RowsAreWellFormed) {
  const auto& table = option_table();
  ASSERT_FALSE(table.empty());
  EXPECT_EQ(table.front().name, "model");  // the preset loads before its overrides
  std::set<std::string> names;
  const std::string help = options_help();
  const Options defaults;
  for (const auto& row : table) {
    EXPECT_TRUE(names.insert(row.name).second) << row.name << " twice";
    EXPECT_TRUE(row.get && row.set) << row.name;
    EXPECT_FALSE(row.help.empty()) << row.name;
    EXPECT_NE(help.find("--" + row.name + " "), std::string::npos) << row.name;
    EXPECT_NE(row.example, row.get(defaults))
        << row.name << ": the example must not be the default";
    if (row.is_switch) {
      EXPECT_EQ(row.kind, OptionKind::boolean) << row.name;
    }
  }
}

// The table's promise: whatever a run was told prints as INI text that parses
// back to the same Options. Driven by the table, so a new row is covered.
TEST(OptionTable, EveryOptionRoundTripsThroughTheIniText) {
  const auto o = parse(example_flags());
  ASSERT_TRUE(o);
  for (const auto& row : option_table())
    EXPECT_EQ(row.get(*o), row.example) << "--" << row.name << " did not reach its field";
  EXPECT_NE(*o, Options{});

  const std::string ini = options_to_ini(*o, IniScope::everything);
  const std::string path = ::testing::TempDir() + "/fsdp_roundtrip.ini";
  std::ofstream(path) << ini;
  const auto back = parse({"--config", path});
  ASSERT_TRUE(back);
  EXPECT_TRUE(*back == *o) << ini;
  for (const auto& row : option_table())
    EXPECT_EQ(row.get(*back), row.example) << "--" << row.name << " after the INI text";
  std::remove(path.c_str());
}

// Each row read from the file gives what it gives as a flag.
TEST(OptionTable, EachOptionReadsTheSameFromTheIniFile) {
  const auto all_flags = parse(example_flags());
  ASSERT_TRUE(all_flags);
  const std::string path = ::testing::TempDir() + "/fsdp_one_row.ini";
  for (const auto& row : option_table()) {
    std::ofstream(path) << row.name << " = " << row.example << "\n";
    auto args = example_flags(row.name);
    args.insert(args.end(), {"--config", path});
    const auto o = parse(args);
    ASSERT_TRUE(o) << row.name;
    EXPECT_TRUE(*o == *all_flags) << "--" << row.name << " from the INI file";
  }
  std::remove(path.c_str());
}

TEST(OptionTable, CheckpointCopyLeavesOutOnlyRunControl) {
  const auto o = parse(example_flags());
  ASSERT_TRUE(o);
  const std::string ini = options_to_ini(*o);
  for (const auto& row : option_table()) {
    const bool printed = ini.find(row.name + " = " + row.example + "\n") != std::string::npos;
    EXPECT_EQ(printed, !row.run_control) << row.name;
  }
}

// A resume compares the checkpoint's INI text with its own through this reader.
TEST(OptionTable, IniTextReadsBackAsEachRowsValue) {
  const auto o = parse(example_flags());
  ASSERT_TRUE(o);
  const auto values = ini_to_values(options_to_ini(*o, IniScope::everything));
  for (const auto& row : option_table()) {
    const auto it = values.find(row.name);
    ASSERT_NE(it, values.end()) << row.name;
    EXPECT_EQ(it->second, row.example) << row.name;
  }
  EXPECT_EQ(values.size(), option_table().size());
}

// --prompt is the one repeatable option: every value counts, in order, from
// flags or INI lines; the flags' values replace the file's; --samples
// defaults to one of each.
TEST(Options, PromptRepeatsAndAsksForSamples) {
  const auto o = parse({"--train-data", "x.h5", "--prompt", "a b", "--prompt", "c"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->sample.prompts, (std::vector<std::string>{"a b", "c"}));
  EXPECT_EQ(o->sample.count, 1);
  EXPECT_EQ(parse({"--train-data", "x.h5", "--prompt", "a", "--samples", "4"})->sample.count, 4);
  EXPECT_EQ(parse({"--train-data", "x.h5"})->sample.count, 0);

  const std::string path = ::testing::TempDir() + "/fsdp_prompts.ini";
  std::ofstream(path) << "prompt = from the file\nprompt = and again\n";
  const auto file = parse({"--train-data", "x.h5", "--config", path});
  ASSERT_TRUE(file);
  EXPECT_EQ(file->sample.prompts, (std::vector<std::string>{"from the file", "and again"}));
  EXPECT_NE(options_to_ini(*file, IniScope::everything)
                .find("prompt = from the file\nprompt = and again\n"),
            std::string::npos);
  const auto flags = parse({"--train-data", "x.h5", "--config", path, "--prompt", "flag"});
  EXPECT_EQ(flags->sample.prompts, (std::vector<std::string>{"flag"}));
  std::remove(path.c_str());

  EXPECT_NE(error_of({"--train-data", "x.h5", "--prompt", "a", "--prompt", ""})
                .find("--prompt: '' is invalid: must not be empty"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x.h5", "--prompt", "a", "--samples", "0"})
                .find("--prompt needs --samples"),
            std::string::npos);
}

TEST(Options, HelpReturnsNothing) {
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(parse({"--help"}));
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("--train-data"), std::string::npos);
}

// Linear: a straight line from the peak after the warmup to min_lr at the
// last step. WSD: the peak until the last decay_fraction of the steps, then a
// straight line that reaches min_lr at the last step.
double seconds_of(const std::string& text) {
  Duration d{-1};
  const std::string rule = parse_value(text, d);
  EXPECT_EQ(rule, "") << text;
  return d.seconds;
}

std::string rule_of(const std::string& text) {
  Duration d;
  return parse_value(text, d);
}

TEST(Duration, ReadsUnitsAndClockTimes) {
  EXPECT_EQ(seconds_of("90m"), 5400);
  EXPECT_EQ(seconds_of("1.5h"), 5400);
  EXPECT_EQ(seconds_of("5400s"), 5400);
  EXPECT_EQ(seconds_of("1:30:00"), 5400);
  EXPECT_EQ(seconds_of("2:05"), 125);
  EXPECT_EQ(seconds_of("0.25s"), 0.25);
  EXPECT_EQ(seconds_of(""), 0);  // off
  EXPECT_EQ(seconds_of("0"), 0);
}

TEST(Duration, RefusesWhatIsNotATime) {
  // A bare number is refused: Slurm reads 90 as minutes.
  for (const char* bad : {"90", "m", "90x", "-5m", "5 m", "1:60:00", "1:5:00", "1:2:3:4", ":30",
                          "1.5:30:00", "infh", "nanm", "0m", "1e30h"})
    EXPECT_NE(rule_of(bad), "") << bad;
  EXPECT_NE(rule_of("90").find("needs its unit"), std::string::npos);
  EXPECT_NE(rule_of("400d").find("duration"), std::string::npos);
  EXPECT_NE(rule_of("9000h").find("at most a year"), std::string::npos);
}

TEST(Duration, PrintsTheShortestExactFormAndReadsItBack) {
  EXPECT_EQ(format_value(Duration{5400}), "90m");
  EXPECT_EQ(format_value(Duration{7200}), "2h");
  EXPECT_EQ(format_value(Duration{125}), "125s");
  EXPECT_EQ(format_value(Duration{0}), "");
  for (double s : {0.1, 1.0 / 3, 59.5, 61.0, 3599.0, 3600.0, 86400.0 * 365}) {
    Duration back;
    ASSERT_EQ(parse_value(format_value(Duration{s}), back), "") << s;
    EXPECT_EQ(back.seconds, s) << format_value(Duration{s});
  }
}

TEST(TimeBudgetOptions, StepsBecomeACapThatDefaultsToNone) {
  EXPECT_EQ(parse({"--train-data", "x.h5", "--time-budget", "90m"})->run.steps, 0);
  EXPECT_EQ(parse({"--train-data", "x.h5", "--time-budget", "90m"})->run.time_budget.seconds, 5400);
  EXPECT_EQ(parse({"--train-data", "x.h5", "--time-budget", "90m", "--steps", "4000"})->run.steps,
            4000);
  EXPECT_EQ(parse({"--train-data", "x.h5"})->run.steps, 100);  // no budget: the default count
  // --stop-at-step has no count to stay under without a cap.
  EXPECT_EQ(parse({"--train-data", "x.h5", "--time-budget", "1h", "--checkpoint-dir", "c",
                   "--stop-at-step", "500"})
                ->run.stop_at_step,
            500);
  EXPECT_NE(error_of({"--train-data", "x.h5", "--steps", "0"}).find("--steps: '0' is invalid"),
            std::string::npos);
}

TEST(TimeBudgetOptions, RefusedWhereItCannotPlan) {
  EXPECT_NE(error_of({"--train-data", "x.h5", "--time-budget", "1h", "--warmup-steps", "0"})
                .find("--warmup-steps"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x.h5", "--time-budget", "90"})
                .find("--time-budget: '90' is invalid"),
            std::string::npos);
}

TEST(LrSchedule, LinearAndWarmupStableDecay) {
  LrSchedule s{.lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10, .shape = LrShape::linear};
  EXPECT_FLOAT_EQ(lr_at(9, 101, s), 1.0f);
  EXPECT_NEAR(lr_at(10, 101, s), 1.0f, 1e-6);
  EXPECT_NEAR(lr_at(55, 101, s), 0.55f, 1e-6);  // half way: progress 45/90
  EXPECT_NEAR(lr_at(100, 101, s), 0.1f, 1e-6);
  s.shape = LrShape::wsd;
  s.decay_fraction = 0.2f;                  // the last 20 of 100 steps
  EXPECT_FLOAT_EQ(lr_at(0, 100, s), 0.1f);  // warmup unchanged
  EXPECT_FLOAT_EQ(lr_at(10, 100, s), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(79, 100, s), 1.0f);  // stable to the decay
  EXPECT_NEAR(lr_at(80, 100, s), 1.0f - 0.9f / 20, 1e-6);
  EXPECT_NEAR(lr_at(89, 100, s), 0.55f, 1e-6);
  EXPECT_NEAR(lr_at(99, 100, s), 0.1f, 1e-6);
  for (int i = 80; i < 99; ++i) EXPECT_GT(lr_at(i, 100, s), lr_at(i + 1, 100, s)) << i;
  // A decay longer than what follows the warmup starts at the warmup's end.
  s.decay_fraction = 1.0f;
  EXPECT_NEAR(lr_at(10, 100, s), 1.0f - 0.9f / 90, 1e-6);
  EXPECT_NEAR(lr_at(99, 100, s), 0.1f, 1e-6);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  const LrSchedule s{.lr = 1.0f, .min_lr = 0.1f, .warmup_steps = 10};
  EXPECT_FLOAT_EQ(lr_at(0, 100, s), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(9, 100, s), 1.0f);
  EXPECT_NEAR(lr_at(10, 100, s), 1.0f, 1e-6);
  EXPECT_NEAR(lr_at(99, 100, s), 0.1f, 1e-6);
  EXPECT_NEAR(lr_at(54, 100, s), 0.55f, 0.02);
  for (int step = 10; step < 99; ++step) EXPECT_GE(lr_at(step, 100, s), lr_at(step + 1, 100, s));
  // no warmup starts at the peak
  EXPECT_FLOAT_EQ(lr_at(0, 5, {.lr = 2.0f, .min_lr = 0.0f, .warmup_steps = 0}), 2.0f);
}

}  // namespace
}  // namespace fsdp
