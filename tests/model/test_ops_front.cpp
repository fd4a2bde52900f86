// Ops' front door: arguments are checked once, before any backend code runs,
// with a message that names the op's argument; the hook sees each call the
// caller made, once, with its key, and an op that throws as begun but not
// ended; capabilities are the backend's answers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/cpu/cpu_ops.h"
#include "tests/common/error_of.h"

namespace fsdp {
namespace {

// The reference backend, counting the do_ methods the front door reached.
struct CountingOps : CpuOps {
  int linears = 0, adamws = 0;
  void do_linear(Tensor y, Tensor x, Tensor w, int M, int N, int K) override {
    ++linears;
    CpuOps::do_linear(y, x, w, M, N, K);
  }
  void do_adamw(Tensor param, Tensor grad, Tensor exp_avg, Tensor exp_avg_sq, Tensor send,
                const std::vector<AdamWSpan>& spans, const AdamWHyper& h,
                bool clear_grad) override {
    ++adamws;
    CpuOps::do_adamw(param, grad, exp_avg, exp_avg_sq, send, spans, h, clear_grad);
  }
};

using testing::error_of;

TEST(OpsFront, RefusesBeforeTheBackendRuns) {
  CountingOps ops;
  std::vector<float> y(6), x(6), w(9);
  auto t = [](std::vector<float>& v, int64_t n) { return Tensor{v.data(), DType::f32, n}; };
  ops.linear(t(y, 6), t(x, 6), t(w, 9), 2, 3, 3);
  EXPECT_EQ(ops.linears, 1);
  const std::string short_y = error_of([&] { ops.linear(t(y, 5), t(x, 6), t(w, 9), 2, 3, 3); });
  EXPECT_NE(short_y.find("linear y has 5 elements, the op needs 6"), std::string::npos) << short_y;
  std::vector<uint16_t> xb(6);
  const std::string bf = error_of([&] {
    ops.linear(t(y, 6), Tensor{xb.data(), DType::bf16, 6}, t(w, 9), 2, 3, 3);
  });
  EXPECT_NE(bf.find("linear x is bf16, the cpu backend computes in f32"), std::string::npos) << bf;
  EXPECT_EQ(ops.linears, 1);  // neither bad call reached the backend

  // Unsorted spans are refused whole, before any element moves.
  std::vector<float> p(8, 1.0f), g(8, 1.0f), m(8), v(8);
  const std::vector<float> before = p;
  EXPECT_THROW(ops.adamw(t(p, 8), t(g, 8), t(m, 8), t(v, 8), {}, {{0, 4, 0.0f}, {2, 4, 0.0f}},
                         {0.1f, 0.9f, 0.95f, 1e-8f, 1.0f, 1}, false),
               Error);
  EXPECT_EQ(ops.adamws, 0);
  EXPECT_EQ(p, before);
}

// Records what the hook is told.
struct Recorder : OpHook {
  std::vector<std::string> begun, ended;
  void begin(const OpCall& c) override { begun.push_back(c.key); }
  void end(const OpCall& c) override { ended.push_back(c.key); }
};

TEST(OpsFront, HookSeesEachCallOnceAndNotRefusedOnes) {
  CpuOps ops;
  Recorder r;
  ops.set_hook(&r);
  std::vector<float> y(6), x(6), w(9), rr(6);
  auto t = [](std::vector<float>& v, int64_t n) { return Tensor{v.data(), DType::f32, n}; };
  // CPU linear_add runs do_linear inside: one call, one key.
  ops.linear_add(t(y, 6), t(x, 6), t(w, 9), t(rr, 6), 2, 3, 3);
  EXPECT_THROW(ops.linear(t(y, 5), t(x, 6), t(w, 9), 2, 3, 3), Error);  // refused: not seen
  // Passed by the door, thrown by the backend (a token outside the
  // vocabulary of 2): begun, never ended.
  std::vector<int32_t> tokens = {0, 2};
  EXPECT_THROW(ops.embedding(t(y, 6), Tensor{tokens.data(), DType::i32, 2}, t(w, 6), 2, 3), Error);
  ops.set_hook(nullptr);
  ops.zero(t(y, 6));  // unhooked: not seen
  EXPECT_EQ(r.begun, (std::vector<std::string>{"linear_add 2x3x3", "embedding 2x3"}));
  EXPECT_EQ(r.ended, std::vector<std::string>{"linear_add 2x3x3"});
}

TEST(OpsFront, CpuCapabilities) {
  const OpsCapabilities c = CpuOps().capabilities();
  EXPECT_TRUE(c.host_memory);
  EXPECT_FALSE(c.native_fp8);
  EXPECT_EQ(c.peak_flops, 0.0);
}

}  // namespace
}  // namespace fsdp
