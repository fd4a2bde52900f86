#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "src/lr_schedule.h"
#include "src/options.h"

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
  EXPECT_EQ(o->seq_len, o->model.max_seq_len);  // 0 means the model's context
  EXPECT_TRUE(o->reshard_after_forward);
  EXPECT_EQ(o->device, "auto");
}

TEST(Options, ModelFieldsOverrideThePreset) {
  auto o = parse({"--train-data", "x.h5", "--model", "gpt-350m", "--n-layer", "4",
                  "--tie-embeddings", "false", "--seq-len", "256"});
  ASSERT_TRUE(o);
  EXPECT_EQ(o->model.n_layer, 4);
  EXPECT_EQ(o->model.d_model, 1024);  // untouched fields keep the preset's
  EXPECT_FALSE(o->model.tie_embeddings);
  EXPECT_EQ(o->seq_len, 256);
}

TEST(Options, ConfigFileWithFlagsWinning) {
  const std::string path = ::testing::TempDir() + "/fsdp_options.ini";
  std::ofstream(path) << "# comment\nlr = 0.01\nsteps = 7\nmodel = gpt-125m\nd-model = 512\n"
                         "reshard-after-forward = false\n";
  auto o = parse({"--config", path, "--train-data", "x.h5", "--steps", "9", "--n-head", "8"});
  ASSERT_TRUE(o);
  EXPECT_FLOAT_EQ(o->lr, 0.01f);
  EXPECT_EQ(o->steps, 9);  // the flag beats the file
  EXPECT_EQ(o->model.name, "gpt-125m");
  EXPECT_EQ(o->model.d_model, 512);
  EXPECT_EQ(o->model.n_head, 8);
  EXPECT_FALSE(o->reshard_after_forward);
  std::remove(path.c_str());
}

TEST(Options, BadValuesNameTheFlag) {
  EXPECT_NE(error_of({"--train-data", "x", "--lr", "0"}).find("--lr"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--min-lr", "1"}).find("--min-lr"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--grad-accum", "0"}).find("--grad-accum"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--precision", "fp16"}).find("fp16"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--seq-len", "65"}).find("--seq-len"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--d-model", "63"}).find("--n-head"),
            std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--steps", "many"}).find("many"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--no-such-flag"}).find("no-such-flag"),
            std::string::npos);
  EXPECT_NE(error_of({}).find("--train-data"), std::string::npos);
  EXPECT_NE(error_of({"--train-data", "x", "--config", "/no/such.ini"}).find("/no/such.ini"),
            std::string::npos);
}

TEST(Options, HelpReturnsNothing) {
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(parse({"--help"}));
  EXPECT_NE(::testing::internal::GetCapturedStdout().find("--train-data"), std::string::npos);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  EXPECT_FLOAT_EQ(lr_at(0, 100, 10, 1.0f, 0.1f), 0.1f);
  EXPECT_FLOAT_EQ(lr_at(9, 100, 10, 1.0f, 0.1f), 1.0f);
  EXPECT_NEAR(lr_at(10, 100, 10, 1.0f, 0.1f), 1.0f, 1e-6);
  EXPECT_NEAR(lr_at(99, 100, 10, 1.0f, 0.1f), 0.1f, 1e-6);
  EXPECT_NEAR(lr_at(54, 100, 10, 1.0f, 0.1f), 0.55f, 0.02);
  for (int s = 10; s < 99; ++s)
    EXPECT_GE(lr_at(s, 100, 10, 1.0f, 0.1f), lr_at(s + 1, 100, 10, 1.0f, 0.1f));
  EXPECT_FLOAT_EQ(lr_at(0, 5, 0, 2.0f, 0.0f), 2.0f);  // no warmup starts at the peak
}

}  // namespace
}  // namespace fsdp
