// Single-GPU benchmark of the CUDA backend at gpt-350m shapes: bf16 GEMM
// throughput per projection, cuDNN attention forward/backward, and a full
// training step (forward + backward, no optimizer, no communication) through
// the Transformer, with tokens/s and MFU by DESIGN.md's formula.
//
//   bench_cuda_ops [--model gpt-350m] [--batch 8] [--seq 1024] [--steps 10]
//                  [--export-init PREFIX]
//
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
#include "tests/model/full_weights.h"

namespace fsdp {
namespace {

constexpr double kPeakTflops = 989.0;  // H100 SXM dense bf16 (DESIGN.md)

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

Tensor random_bf16(CudaOps& ops, int64_t n, std::mt19937& rng) {
  std::vector<float> h(static_cast<size_t>(n));
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto& x : h) x = d(rng);
  Tensor f = ops.alloc(DType::f32, n), t = ops.alloc(DType::bf16, n);
  ops.to_device(f, h.data());
  ops.cast(t, f);
  ops.free(f);
  return t;
}

void bench_linear(CudaOps& ops, const ModelConfig& c, int M) {
  std::mt19937 rng(1);
  struct Shape {
    const char* name;
    int N, K;
  };
  const Shape shapes[] = {{"wq/wo (d x d)", c.d_model, c.d_model},
                          {"wk/wv (kv x d)", c.kv_dim(), c.d_model},
                          {"w1/w3 (ff x d)", c.d_ff, c.d_model},
                          {"w2 (d x ff)", c.d_model, c.d_ff},
                          {"head (padded vocab x d)", c.padded_vocab(), c.d_model}};
  std::printf("linear, M = %d rows (bf16 in/out, fp32 accumulate):\n", M);
  for (const Shape& s : shapes) {
    Tensor x = random_bf16(ops, int64_t(M) * s.K, rng),
           w = random_bf16(ops, int64_t(s.N) * s.K, rng);
    Tensor y = ops.alloc(DType::bf16, int64_t(M) * s.N),
           dx = ops.alloc(DType::bf16, int64_t(M) * s.K);
    Tensor dw = ops.alloc(DType::bf16, int64_t(s.N) * s.K);
    ops.zero(dw);
    const double flops = 2.0 * M * s.N * s.K;
    const double f = time_ms(ops, 20, [&] { ops.linear(y, x, w, M, s.N, s.K); });
    const double b =
        time_ms(ops, 20, [&] { ops.linear_backward(dx, dw, y, x, w, M, s.N, s.K, false); });
    std::printf("  %-18s N=%5d K=%5d  fwd %7.3f ms %6.1f TFLOP/s   bwd %7.3f ms %6.1f TFLOP/s\n",
                s.name, s.N, s.K, f, flops / f * 1e-9, b, 2 * flops / b * 1e-9);
    for (Tensor t : {x, w, y, dx, dw}) ops.free(t);
  }
}

void bench_attention(CudaOps& ops, const ModelConfig& c, int B, int T) {
  std::mt19937 rng(2);
  const int H = c.n_head, Hkv = c.n_kv_head, hd = c.head_dim();
  const int64_t nq = int64_t(B) * T * H * hd, nkv = int64_t(B) * T * Hkv * hd;
  Tensor q = random_bf16(ops, nq, rng), k = random_bf16(ops, nkv, rng),
         v = random_bf16(ops, nkv, rng);
  Tensor o = ops.alloc(DType::bf16, nq), lse = ops.alloc(DType::f32, int64_t(B) * H * T);
  Tensor dq = ops.alloc(DType::bf16, nq), dk = ops.alloc(DType::bf16, nkv),
         dv = ops.alloc(DType::bf16, nkv);
  // Causal: half of the T x T scores; forward 2 matmuls, backward 5.
  const double fwd_flops = 4.0 * B * H * double(T) * T * hd / 2;
  const double f = time_ms(ops, 20, [&] { ops.attention(o, lse, q, k, v, B, T, H, Hkv, hd); });
  const double b = time_ms(
      ops, 20, [&] { ops.attention_backward(dq, dk, dv, o, o, lse, q, k, v, B, T, H, Hkv, hd); });
  std::printf(
      "attention B=%d T=%d H=%d Hkv=%d hd=%d: fwd %.3f ms %.1f TFLOP/s, bwd %.3f ms %.1f TFLOP/s\n",
      B, T, H, Hkv, hd, f, fwd_flops / f * 1e-9, b, 2.5 * fwd_flops / b * 1e-9);
  for (Tensor t : {q, k, v, o, lse, dq, dk, dv}) ops.free(t);
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
      }
      all.insert(all.end(), w[u].begin(), w[u].end());
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
  const double mfu = c.flops_per_token(T) * tok_s / (kPeakTflops * 1e12);
  std::printf(
      "train step (fwd+bwd, no optimizer) %s B=%d T=%d: %.2f ms, %.0f tokens/s, MFU %.1f%%, "
      "peak memory %.2f GiB\n",
      c.name.c_str(), B, T, ms, tok_s, 100 * mfu, double(ops.peak_device_bytes()) / (1 << 30));
}

int run(int argc, char** argv) {
  std::string model = "gpt-350m", export_prefix;
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
    else
      throw_error("unknown option ", a);
  }
  if (cuda_device_count() == 0) {
    std::printf("bench_cuda_ops: no CUDA device, nothing to measure\n");
    return 0;
  }
  const ModelConfig c = model_preset(model);
  CudaOps ops;
  cudaDeviceProp prop{};
  FSDP_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  bench_linear(ops, c, B * T);
  bench_attention(ops, c, B, T);
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
