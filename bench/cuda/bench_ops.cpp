// Single-GPU benchmark of the CUDA backend: every case of the op table
// (tests/model/op_table/op_table.h, the cases the parity suite test_cuda_ops
// checks) timed with CUDA events, forward and backward where a case has both;
// the same ops at the model's shapes (every projection's GEMM, attention, the
// fused cross-entropy, the optimizer ops on one block); and a full training
// step (forward + backward, no optimizer, no communication) through the
// Transformer, with tokens/s and MFU by the formula of docs/ARCHITECTURE.md, "FLOPs and MFU".
//
//   bench_cuda_ops [--model gpt-350m] [--batch 8] [--seq 1024] [--steps 10]
//                  [--cases all|table|model|none] [--export-init PREFIX]
//
// --cases picks the op cases timed before the step (default all): the parity
// table's small shapes, the model's shapes, or none.
// --export-init writes the initial weights (PREFIX.weights.bin, f32, in
// model_units() order, with a PREFIX.manifest.txt of "name numel shape...")
// and the benchmark's first batch (PREFIX.tokens.bin, int32 [batch, seq+1]),
// and prints that batch's loss, so bench/cuda/torch_reference.py can compare.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/cuda_check.h"
#include "model/cuda/cuda_ops.h"
#include "model/transformer.h"
#include "tests/model/cuda/device_weights.h"
#include "tests/model/op_table/op_table.h"
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

// H100 SXM dense bf16 (docs/ARCHITECTURE.md, "FLOPs and MFU").
constexpr double kPeakTflops = 989.0;

// Milliseconds per call of f, measured with CUDA events on the ops' stream.
template <typename F>
double time_ms(CudaOps& ops, int iters, F f) {
  auto stream = static_cast<cudaStream_t>(ops.stream());
  for (int i = 0; i < 3; ++i) f();
  cudaEvent_t a, b;
  FSDP_CUDA_CHECK(cudaEventCreate(&a));
  FSDP_CUDA_CHECK(cudaEventCreate(&b));
  FSDP_CUDA_CHECK(cudaEventRecord(a, stream));
  for (int i = 0; i < iters; ++i) f();
  FSDP_CUDA_CHECK(cudaEventRecord(b, stream));
  FSDP_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  FSDP_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  ops.synchronize();
  return ms / iters;
}

// "  12.345 ms  456.7 TFLOP/s" (or GB/s): the rate the case's stated work gives.
std::string timing(double ms, double flops, double bytes) {
  char buf[96];
  if (flops > 0)
    std::snprintf(buf, sizeof buf, "%9.4f ms %7.1f TFLOP/s", ms, flops / ms * 1e-9);
  else if (bytes > 0)
    std::snprintf(buf, sizeof buf, "%9.4f ms %7.1f GB/s   ", ms, bytes / ms * 1e-6);
  else
    std::snprintf(buf, sizeof buf, "%9.4f ms                ", ms);
  return buf;
}

// One line per case: op, shape, variant, then forward and (where the case has
// one) backward time and rate. Each case's tensors are freed before the next.
// fresh_limit bounds the host's random-number work for big inputs (they repeat).
void bench_cases(CudaOps& ops, const char* title, const std::vector<test::OpCase>& cases, int iters,
                 int64_t fresh_limit) {
  std::printf("%s:\n", title);
  for (const test::OpCase& c : cases) {
    std::string line;
    try {
      test::Pool pool(ops);
      test::Env env(ops, pool, 1, /*reference=*/false, fresh_limit);
      const test::Bound b = c.bind(env);
      line = "  fwd " + timing(time_ms(ops, iters, b.fwd), c.fwd_flops, c.fwd_bytes);
      // Forward ran first (warm-up included), so backward reads real results.
      if (b.bwd) line += "  bwd " + timing(time_ms(ops, iters, b.bwd), c.bwd_flops, c.bwd_bytes);
    } catch (const Error& e) {
      // A shape the backend refuses (cuDNN attention without a fast engine,
      // which only --debug accepts) costs its line, not the benchmark.
      line = std::string("  not timed: ") + e.what();
    }
    std::printf("  %-13s %-40s %-44s%s\n", c.op.c_str(), c.shape.c_str(), c.variant.c_str(),
                line.c_str());
    std::fflush(stdout);
  }
}

void write_file(const std::string& path, const void* p, size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(p), std::streamsize(bytes));
  if (!f) throw_error("cannot write ", path);
}

void bench_step(CudaOps& ops, const ModelConfig& c, int B, int T, int steps,
                const std::string& export_prefix) {
  const auto units = model_units(c);
  testing::FullWeights host(units, 1234);
  std::vector<std::vector<float>> w;
  for (int u = 0; u < int(units.size()); ++u) w.push_back(host.unit_weights(u));
  test::DeviceWeights dev(ops, units, w);
  Transformer m(c, ops, B, T);

  std::mt19937 rng(3);
  std::uniform_int_distribution<int> pick(0, c.vocab_size - 1);
  std::vector<int32_t> seq(size_t(B) * (T + 1)), in(size_t(B) * T), tg(size_t(B) * T);
  auto new_batch = [&] {
    for (auto& t : seq) t = pick(rng);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        in[size_t(b) * T + t] = seq[size_t(b) * (T + 1) + t];
        tg[size_t(b) * T + t] = seq[size_t(b) * (T + 1) + t + 1];
      }
  };
  double first_loss = 0;
  auto step = [&](bool record) {
    new_batch();
    dev.zero_grads();
    m.set_batch(in.data(), tg.data(), 1.0f / float(B * T));
    for (int u = 0; u < m.num_units(); ++u) m.forward(u, dev, true);
    if (record) first_loss = m.loss_sum() / double(B * T);
    for (int u = m.num_units() - 1; u >= 0; --u) m.backward(u, dev);
  };
  step(true);
  if (!export_prefix.empty()) {
    std::ofstream man(export_prefix + ".manifest.txt");
    std::vector<float> all;
    for (int u = 0; u < int(units.size()); ++u) {
      for (int p = 0; p < int(units[u].params.size()); ++p) {
        const ParamSpec& ps = units[u].params[p];
        man << ps.name << ' ' << ps.numel();
        for (int64_t d : ps.shape) man << ' ' << d;
        man << '\n';
        // The logical tensor only: the flat unit also holds alignment gaps and
        // the padded vocabulary rows, which the manifest does not describe.
        const auto first = w[u].begin() + units[u].offset_of(p);
        all.insert(all.end(), first, first + ps.numel());
      }
    }
    write_file(export_prefix + ".weights.bin", all.data(), all.size() * sizeof(float));
    write_file(export_prefix + ".tokens.bin", seq.data(), seq.size() * sizeof(int32_t));
    std::printf("exported initial weights and first batch to %s.*\n", export_prefix.c_str());
  }
  std::printf("first batch mean loss %.6f (ln V = %.4f)\n", first_loss,
              std::log(double(c.vocab_size)));
  step(false);
  const double ms = time_ms(ops, steps, [&] { step(false); });
  const double tok_s = double(B) * T / (ms * 1e-3);
  const double mfu = flops_per_token(c, T) * tok_s / (kPeakTflops * 1e12);
  std::printf(
      "train step (fwd+bwd, no optimizer) %s B=%d T=%d: %.2f ms, %.0f tokens/s, MFU %.1f%%, "
      "peak memory %.2f GiB\n",
      c.name.c_str(), B, T, ms, tok_s, 100 * mfu, double(ops.peak_device_bytes()) / (1 << 30));
}

int run(int argc, char** argv) {
  std::string model = "gpt-350m", export_prefix, cases = "all";
  int B = 8, T = 1024, steps = 10;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) throw_error(a, " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--model")
      model = next();
    else if (a == "--batch")
      B = std::stoi(next());
    else if (a == "--seq")
      T = std::stoi(next());
    else if (a == "--steps")
      steps = std::stoi(next());
    else if (a == "--export-init")
      export_prefix = next();
    else if (a == "--cases")
      cases = next();
    else
      throw_error("unknown option ", a);
  }
  if (cases != "all" && cases != "table" && cases != "model" && cases != "none")
    throw_error("--cases takes all, table, model or none, not ", cases);
  if (cuda_device_count() == 0) {
    std::printf("bench_cuda_ops: no CUDA device, nothing to measure\n");
    return 0;
  }
  const ModelConfig c = model_preset(model);
  CudaOps ops;
  cudaDeviceProp prop{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  if (cases == "all" || cases == "table")
    bench_cases(ops, "op table (the parity suite's cases)", test::op_cases(), 20, 0);
  if (cases == "all" || cases == "model")
    bench_cases(ops,
                (c.name + " shapes, B=" + std::to_string(B) + " T=" + std::to_string(T)).c_str(),
                test::model_op_cases(c, B, T), 20, int64_t(1) << 22);
  bench_step(ops, c, B, T, steps, export_prefix);
  return 0;
}

}  // namespace
}  // namespace fsdp

int main(int argc, char** argv) {
  try {
    return fsdp::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cuda_ops: error: %s\n", e.what());
    return 1;
  }
}
