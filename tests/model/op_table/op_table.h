// One table of op cases that drives the GPU parity suite
// (tests/model/cuda/test_cuda_ops.cpp: every case, CUDA vs the fp32 CPU
// reference), the gradient check (test_op_table.cpp: every case with a
// backward, its gradients against finite differences of its forward on the
// reference) and the op benchmark (bench/cuda/bench_ops.cpp: every case timed
// with CUDA events), as ggml's test-backend-ops does. Adding a case adds its
// test, its gradient check and its benchmark at once.
//
// A case names the op, its shapes, the device dtypes and what else varies,
// and has one function, bind(Env&), that builds the case's tensors on one
// backend and returns the calls to make (forward, and backward where the op
// has one) plus the checks to make after each. bind runs once per backend with
// the same seed, so the reference and the device start from identical
// bf16-representable inputs. Outputs are poisoned with NaN when they are made,
// so an element an op forgets to write fails the check.
//
// Cases live in one file per op family (`<family>_cases.cpp`, as the CUDA
// kernels live in one .cu per family), each adding its own to the table with
// FSDP_OP_FAMILY; nothing else lists them.
//
// Tolerances (relative L2 error ||gpu - cpu|| / ||cpu|| unless bitwise) carry
// their reason; each check names one. A real bug (wrong transpose, head
// mapping, sign, missing term) gives errors of order 1e-1 or more.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/ops.h"
#include "tests/model/op_table/tensor_io.h"

namespace fsdp::test {

struct Tol {
  double rel;  // relative L2 bound; 0 = bitwise equal
  const char* why;
};

inline constexpr Tol kRound{
    4e-3,
    "elementwise op, fp32 math, bf16 output: rounding one value to bf16 costs up to "
    "2^-9 = 2e-3 relative, about 1.1e-3 in L2"};
inline constexpr Tol kGemm{
    5e-3,
    "cuBLASLt rounds the fp32 accumulator to bf16 once; its summation order differs from "
    "OpenBLAS by ~1e-6"};
inline constexpr Tol kAttn{
    1e-2,
    "cuDNN rounds the probabilities to bf16 before the P.V product (flash attention does), and "
    "backward chains several bf16 intermediates; 1e-2 is the loose end of the issue's "
    "1e-3..1e-2 band"};
inline constexpr Tol kF32{
    1e-4,
    "fp32 output (rstd, lse, losses): fp32 arithmetic with fast exponentials against the "
    "reference's double"};
inline constexpr Tol kF32Sum{
    1e-3,
    "fp32 dg: a sum over rows of products of bf16 inputs, in fp32 partials per block on the GPU "
    "against the reference's loop; no bf16 rounding of the result, so tighter than kRound"};
inline constexpr Tol kF32Exact{
    1e-6, "fp32 in and out, the same formula; only fp32 operation order (FMA, atomics) differs"};
inline constexpr Tol kSumSq{1e-9,
                            "sum of squares returned in double: only the order of the partial "
                            "sums differs"};
inline constexpr Tol kBitwise{0.0, "a gather, copy or rounding has exactly one right answer"};

// One value or tensor to compare after a forward or backward.
struct Check {
  std::string what;
  Tensor t;  // downloaded and compared with the reference's tensor at the same index
  Tol tol;
  // Non-empty: the device's t must match these host values instead of the
  // reference's (an input that must come back, a known result).
  std::vector<float> want;
  // Set: a host value the op returned (sum_squares) instead of a tensor.
  std::function<double()> scalar;
};

// One backend's instance of a case.
struct Bound {
  std::function<void()> fwd;  // always set
  std::function<void()> bwd;  // empty where the op has no backward
  std::vector<Check> fwd_checks, bwd_checks;
  // Forward results that backward reads, made equal on both sides between
  // forward and backward so only backward is judged: the device's tensors in
  // from_ref take the reference's values, the reference's tensors in from_dev
  // take the device's. Ignored by the benchmark.
  std::vector<Tensor> from_ref, from_dev;

  // Gradient mode (finite differences of fwd on the reference): the scalar
  // L = sum over `loss` of weight . out, read after fwd. After fwd and bwd
  // each grad's dx holds dL/dx (added: dx += dL/dx). Before every forward
  // the mode puts back each x, so an op that overwrites its input (the
  // cross-entropy's logits) is differentiated from the same point.
  struct Term {
    Tensor out;
    Tensor weight;  // dy, as backward reads it; empty: every element weighs `scale`
    float scale = 1.0f;
  };
  struct Grad {
    std::string what;
    Tensor x, dx;
    bool added = false;
  };
  std::vector<Term> loss;
  std::vector<Grad> grads;
  // Why a case with a backward declares no grads (a strided view of a packed
  // case that does; a backward that is no derivative). Empty otherwise.
  std::string no_gradient;
};

// Where one backend's side of a case lives and where its inputs come from.
class Env {
 public:
  // reference: the fp32 CPU backend, where every float tensor is f32.
  // fresh_limit > 0 (the benchmark at model shapes): random vectors repeat
  // after that many fresh values, so gigabytes of inputs cost no host time.
  Env(Ops& ops, Pool& pool, uint32_t seed, bool reference, int64_t fresh_limit = 0)
      : ops(ops), pool(pool), rng(seed), reference(reference), fresh_limit(fresh_limit) {}

  // The dtype a tensor gets on this backend: d on the device, f32 on the
  // reference for floats (u8 FP8 codes stay u8: the reference makes the same bits).
  DType dt(DType d) const { return reference && d != DType::u8 ? DType::f32 : d; }
  // Random bf16-representable values in [lo, hi), never zero; the same
  // sequence on every backend bound with the same seed.
  std::vector<float> rnd(int64_t n, float lo = -1.0f, float hi = 1.0f);
  Tensor in(DType d, const std::vector<float>& h) { return pool.make(dt(d), h); }
  // An output, poisoned with NaN.
  Tensor out(DType d, int64_t n);
  Tensor tokens(const std::vector<int32_t>& h) { return pool.tokens(h); }

  Ops& ops;
  Pool& pool;
  std::mt19937 rng;
  const bool reference;
  const int64_t fresh_limit;
};

struct OpCase {
  std::string op;       // the Ops method(s), e.g. "linear"
  std::string shape;    // e.g. "M=256 N=192 K=128"
  std::string variant;  // what else differs between cases of one shape; may be empty
  std::string dtypes;   // of the device's tensors
  // Work per call of fwd / bwd, for the benchmark's rates: useful FLOPs (GEMM,
  // attention) or bytes the op must move at least (memory-bound ops); 0 where
  // a rate means nothing.
  double fwd_flops = 0, bwd_flops = 0, fwd_bytes = 0, bwd_bytes = 0;
  std::function<Bound(Env&)> bind;

  // op_shape_variant with every non-alphanumeric run made one '_' (a valid,
  // unique GoogleTest parameter name).
  std::string name() const;
};

// The parity protocol for one case bound on a reference and a device:
// forward on both, compare(ref checks, device checks); hand forward results
// across (Bound::from_ref, from_dev); backward on both, compare again.
void run_parity(const Bound& r, const Bound& d, Ops& ref, Ops& dev,
                const std::function<void(const std::vector<Check>& ref_checks,
                                         const std::vector<Check>& dev_checks)>& compare);

// The model shapes a family's benchmark cases are made at: B sequences of T
// tokens of model c, whose transformer blocks hold `block` parameters.
struct ModelShape {
  const ModelConfig& c;
  int B, T;
  int64_t block;
  int M() const { return B * T; }
  int qkv() const { return c.q_dim() + 2 * c.kv_dim(); }  // the q|k|v GEMM's width
};

// One op family's cases: the parity table's (small shapes that exercise
// every path: vectorised and not, aliasing, accumulation, padding, ignored
// targets, at sizes the CPU reference computes in seconds) and, optionally,
// the same ops at a model's shapes (for the benchmark only: the CPU
// reference would take minutes on them).
struct OpFamily {
  std::string name;  // orders the table
  std::function<void(std::vector<OpCase>&)> cases;
  std::function<void(std::vector<OpCase>&, const ModelShape&)> model_cases;
};

// Adds a family to the table; called during static initialisation by
// FSDP_OP_FAMILY, once per family file. Returns true.
bool add_op_family(OpFamily f);
#define FSDP_OP_FAMILY(...)                                 \
  [[maybe_unused]] static const bool fsdp_op_family_added = \
      ::fsdp::test::add_op_family(::fsdp::test::OpFamily{__VA_ARGS__})

// The parity table: every family's cases, families in name order.
std::vector<OpCase> op_cases();

// The same ops at one model's shapes (B sequences of T tokens).
std::vector<OpCase> model_op_cases(const ModelConfig& c, int B, int T);

}  // namespace fsdp::test
