// The op table's FP8 cases (see op_table.h): per-tensor quantization must give the
// reference's codes and scale bit for bit (one rounding per element, a max,
// one division: nothing order-dependent), and dequantization its values.
#include <cmath>
#include <utility>

#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

OpCase quantize_fp8_case(int64_t n, Fp8 format, DType src, bool zeros = false) {
  OpCase c;
  c.op = "quantize_fp8";
  c.shape = fmt("n=%lld", static_cast<long long>(n));
  c.variant = std::string(fp8_name(format)) + " from " + dtype_name(src) +
              (zeros ? ", all zero (scale 1)" : ", magnitudes over 2^24");
  c.dtypes = std::string("src,dst ") + dtype_name(src) + "; q u8; scale_inv f32";
  c.fwd_bytes = 2.0 * n * double(dtype_size(src)) + double(n);  // amax pass, cast pass
  c.bwd_bytes = double(n) + double(n) * double(dtype_size(src));
  c.bind = [=](Env& e) {
    std::vector<float> x = e.rnd(n, -3.0f, 3.0f);
    // Powers of two keep the values bf16-representable: after scaling, the
    // small ones land among FP8's subnormals or round to zero.
    for (int64_t i = 0; i < n; ++i)
      x[size_t(i)] = zeros ? 0.0f : std::ldexp(x[size_t(i)], -int(i % 25));
    Tensor xt = e.in(src, x), q = e.out(DType::u8, n), si = e.out(F32, 1);
    Tensor back = e.out(src, n);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.quantize_fp8(q, si, xt, format); };
    b.fwd_checks = {vs_ref("quantize_fp8 codes", q, kBitwise),
                    vs_ref("quantize_fp8 scale_inv", si, kBitwise)};
    if (zeros) b.fwd_checks.push_back(vs_host("scale_inv of zeros", si, kBitwise, {1.0f}));
    // Dequantize the reference's codes, so only dequantize is judged; a bf16
    // destination rounds what the reference keeps in f32.
    b.from_ref = {q, si};
    b.bwd = [=, &o] { o.dequantize_fp8(back, q, si, format); };
    b.bwd_checks = {vs_ref("dequantize_fp8", back, src == BF ? kRound : kBitwise)};
    b.no_gradient = "backward is dequantize_fp8, the cast's inverse, not a derivative";
    return b;
  };
  return c;
}

// Cast and transpose in one pass: both the codes and their transpose must be
// the reference's bit for bit (sizes that are not multiples of the kernels'
// tiles exercise the edges).
OpCase quantize_fp8_t_case(int rows, int cols, Fp8 format, DType src) {
  OpCase c;
  c.op = "quantize_fp8_t";
  c.shape = fmt("rows=%d cols=%d", rows, cols);
  c.variant = std::string(fp8_name(format)) + " from " + dtype_name(src) + ", and transposed";
  c.dtypes = std::string("src ") + dtype_name(src) + "; q, qt u8; scale_inv f32";
  const int64_t n = int64_t(rows) * cols;
  c.fwd_bytes = 2.0 * n * double(dtype_size(src)) + 2.0 * n;
  c.bind = [=](Env& e) {
    std::vector<float> x = e.rnd(n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::ldexp(x[size_t(i)], -int(i % 13));
    Tensor xt = e.in(src, x), q = e.out(DType::u8, n), qt = e.out(DType::u8, n);
    Tensor si = e.out(F32, 1);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.quantize_fp8_t(q, qt, si, xt, rows, cols, format); };
    b.fwd_checks = {vs_ref("quantize_fp8_t codes", q, kBitwise),
                    vs_ref("quantize_fp8_t transposed codes", qt, kBitwise),
                    vs_ref("quantize_fp8_t scale_inv", si, kBitwise)};
    return b;
  };
  return c;
}

// The backward's cast of an activation by the amax its forward recorded
// (given here, larger than the data's own), with or without the row-major
// codes.
OpCase quantize_fp8_t_amax_case(int rows, int cols, DType src, bool t_only) {
  OpCase c;
  c.op = "quantize_fp8_t_amax";
  c.shape = fmt("rows=%d cols=%d", rows, cols);
  c.variant = std::string("e4m3 from ") + dtype_name(src) + " by a given amax" +
              (t_only ? ", the transpose only" : ", and transposed");
  c.dtypes = std::string("src ") + dtype_name(src) + "; amax, scale_inv f32; q, qt u8";
  const int64_t n = int64_t(rows) * cols;
  c.fwd_bytes = double(n) * double(dtype_size(src)) + (t_only ? 1.0 : 2.0) * n;
  c.bind = [=](Env& e) {
    std::vector<float> x = e.rnd(n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::ldexp(x[size_t(i)], -int(i % 11));
    Tensor xt = e.in(src, x), amax = e.in(F32, {4.5f}), qt = e.out(DType::u8, n);
    Tensor q = t_only ? Tensor{} : e.out(DType::u8, n), si = e.out(F32, 1);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.quantize_fp8_t_amax(q, qt, si, xt, amax, rows, cols, Fp8::e4m3); };
    b.fwd_checks = {vs_ref("transposed codes", qt, kBitwise), vs_ref("scale_inv", si, kBitwise)};
    if (!t_only) b.fwd_checks.push_back(vs_ref("codes", q, kBitwise));
    return b;
  };
  return c;
}

// The engine's refresh of its weights' codes: slices of one f32 shard at odd
// offsets, some empty, more than one launch holds (Fp8Each::kMax is 16).
OpCase fp8_each_case() {
  OpCase c;
  c.op = "quantize_fp8_amax_each";
  c.shape = "20 slices of one f32 buffer";
  c.variant = "amax_each, then e4m3 by each amax (one raised, as by another rank)";
  c.dtypes = "src f32; amax, scale_inv f32; q u8";
  std::vector<int64_t> sizes;
  for (int i = 0; i < 19; ++i) sizes.push_back(std::vector<int64_t>{1000, 0, 1, 3001, 257}[i % 5]);
  sizes.push_back(100003);
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  c.fwd_bytes = 2.0 * total * 4 + double(total);
  c.bind = [=](Env& e) {
    std::vector<float> x = e.rnd(total + 3, -3.0f, 3.0f);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::ldexp(x[i], -int(i % 19));
    const int k = int(sizes.size());
    Tensor xt = e.in(F32, x), m = e.out(F32, k), q = e.out(DType::u8, total);
    Tensor si = e.out(F32, k), agreed = e.in(F32, {7.0f});
    std::vector<Tensor> slices;
    std::vector<Ops::Fp8Cast> casts;
    int64_t at = 0;
    for (int i = 0; i < k; ++i) {
      slices.push_back(xt.slice(3 + at, sizes[size_t(i)]));
      casts.push_back({q.slice(at, sizes[size_t(i)]), si.slice(i, 1), slices.back(),
                       i == 3 ? agreed : m.slice(i, 1)});
      at += sizes[size_t(i)];
    }
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] {
      o.amax_each(m, slices);
      o.quantize_fp8_amax_each(casts, Fp8::e4m3);
    };
    b.fwd_checks = {vs_ref("amax_each", m, kBitwise), vs_ref("codes", q, kBitwise),
                    vs_ref("scale_inv (empty slices too)", si, kBitwise)};
    return b;
  };
  return c;
}

OpCase fp8_gather_cast_case(int rows, int cols) {
  OpCase c;
  c.op = "quantize_fp8_amax";
  c.shape = fmt("rows=%d cols=%d", rows, cols);
  c.variant = "e4m3 from f32 by an agreed amax; amax, transpose_fp8";
  c.dtypes = "src f32; amax, scale_inv f32; q, qt u8";
  const int64_t n = int64_t(rows) * cols;
  c.fwd_bytes = 2.0 * n * 4 + 3.0 * n;  // amax pass, cast pass, transpose
  c.bind = [=](Env& e) {
    std::vector<float> x = e.rnd(n, -3.0f, 3.0f);
    for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::ldexp(x[size_t(i)], -int(i % 17));
    // Another rank's slice held the larger value.
    Tensor xt = e.in(F32, x), agreed = e.in(F32, {5.0f}), m = e.out(F32, 1);
    Tensor q = e.out(DType::u8, n), qt = e.out(DType::u8, n);
    Tensor si = e.out(F32, 1), si_empty = e.out(F32, 1);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] {
      o.amax(m, xt);
      o.quantize_fp8_amax(q, si, xt, agreed, Fp8::e4m3);
      o.quantize_fp8_amax(q.slice(0, 0), si_empty, xt.slice(0, 0), agreed, Fp8::e4m3);
      o.transpose_fp8(qt, q, rows, cols);
    };
    b.fwd_checks = {vs_ref("amax", m, kBitwise), vs_ref("codes", q, kBitwise),
                    vs_ref("scale_inv", si, kBitwise),
                    vs_ref("scale_inv of an empty slice", si_empty, kBitwise),
                    vs_ref("transposed codes", qt, kBitwise)};
    return b;
  };
  return c;
}

// An FP8 GEMM on codes both backends made with quantize_fp8 (bitwise the
// same, see above): only the order of the fp32 sums and the bf16 output
// rounding differ from the reference's product of the dequantized values.
// With a residual, r is added in the GEMM's epilogue (linear_add's role).
OpCase linear_fp8_case(int M, int N, int K, Fp8 x_format, Fp8 w_format, bool residual = false) {
  OpCase c;
  c.op = "linear_fp8";
  c.shape = fmt("M=%d N=%d K=%d", M, N, K);
  c.variant = std::string("x ") + fp8_name(x_format) + ", w " + fp8_name(w_format) +
              (residual ? ", + residual" : "");
  c.dtypes = "x,w u8 codes, f32 scales; y bf16";
  c.fwd_flops = 2.0 * M * N * K;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(int64_t(M) * K, -2.0f, 2.0f), w = e.rnd(int64_t(N) * K, -0.1f, 0.1f);
    Tensor xt = e.in(BF, x), wt = e.in(BF, w);
    Tensor xq = e.out(DType::u8, int64_t(M) * K), wq = e.out(DType::u8, int64_t(N) * K);
    Tensor xs = e.out(F32, 1), ws = e.out(F32, 1), y = e.out(BF, int64_t(M) * N);
    const Tensor r = residual ? e.in(BF, e.rnd(int64_t(M) * N, -1.0f, 1.0f)) : Tensor{};
    e.ops.quantize_fp8(xq, xs, xt, x_format);
    e.ops.quantize_fp8(wq, ws, wt, w_format);
    Ops& o = e.ops;
    Bound b;
    const Fp8Tensor xf{xq, xs, x_format}, wf{wq, ws, w_format};
    b.fwd = [=, &o] { o.linear_fp8(y, xf, wf, r, M, N, K); };
    b.fwd_checks = {vs_ref("linear_fp8 y", y, kGemm), vs_ref("x codes", xq, kBitwise)};
    return b;
  };
  return c;
}

// The backward on FP8 codes as a training step would make them: x and w in
// e4m3, dy in e5m2, each with its transposed copy from quantize_fp8_t.
OpCase linear_backward_fp8_case(int M, int N, int K, bool accumulate_dx, DType dwt) {
  OpCase c;
  c.op = "linear_backward_fp8";
  c.shape = fmt("M=%d N=%d K=%d", M, N, K);
  c.variant = std::string(accumulate_dx ? "dx accumulated" : "dx set") + ", dw " + dtype_name(dwt) +
              "; x, w e4m3, dy e5m2";
  c.dtypes = std::string("codes u8, scales f32; dx bf16; dw ") + dtype_name(dwt);
  c.fwd_flops = 4.0 * M * N * K;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(int64_t(M) * K, -2.0f, 2.0f), w = e.rnd(int64_t(N) * K, -0.1f, 0.1f);
    const auto dy = e.rnd(int64_t(M) * N, -1e-3f, 1e-3f);
    const auto dx0 = e.rnd(int64_t(M) * K), dw0 = e.rnd(int64_t(N) * K);
    auto codes = [&](const std::vector<float>& v, int rows, int cols, Fp8 f) {
      Tensor t = e.in(BF, v), q = e.out(DType::u8, int64_t(rows) * cols);
      Tensor qt = e.out(DType::u8, int64_t(rows) * cols), s = e.out(F32, 1);
      e.ops.quantize_fp8_t(q, qt, s, t, rows, cols, f);
      return std::pair{Fp8Tensor{q, s, f}, Fp8Tensor{qt, s, f}};
    };
    const auto [xq, xt] = codes(x, M, K, Fp8::e4m3);
    const auto [wq, wt] = codes(w, N, K, Fp8::e4m3);
    const auto [g, gt] = codes(dy, M, N, Fp8::e5m2);
    Tensor dx = accumulate_dx ? e.in(BF, dx0) : e.out(BF, int64_t(M) * K), dw = e.in(dwt, dw0);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.linear_backward_fp8(dx, dw, g, gt, xt, wt, M, N, K, accumulate_dx); };
    b.fwd_checks = {vs_ref(accumulate_dx ? "fp8 dx (+=)" : "fp8 dx", dx, kGemm),
                    vs_ref(std::string("fp8 dw (") + dtype_name(dwt) + ", +=)", dw, kGemm)};
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "fp8",
    [](std::vector<OpCase>& t) {
      // n = 100003: odd, so no kernel can assume a multiple of its vector width.
      for (Fp8 f : {Fp8::e4m3, Fp8::e5m2})
        for (DType src : {F32, BF}) t.push_back(quantize_fp8_case(100003, f, src));
      t.push_back(quantize_fp8_case(1000, Fp8::e4m3, BF, /*zeros=*/true));
      // 300 and 77 rows (not multiples of 16): the 32 x 32 kernel; 320 and 96:
      // the vectorised 64 x 64 one, with partial tiles in both directions.
      t.push_back(quantize_fp8_t_case(300, 200, Fp8::e4m3, BF));
      t.push_back(quantize_fp8_t_case(77, 1030, Fp8::e5m2, F32));
      t.push_back(quantize_fp8_t_case(320, 200, Fp8::e4m3, BF));
      t.push_back(quantize_fp8_t_case(96, 1032, Fp8::e5m2, F32));
      for (bool t_only : {true, false}) {
        t.push_back(quantize_fp8_t_amax_case(320, 200, BF, t_only));   // 64 x 64 tiles
        t.push_back(quantize_fp8_t_amax_case(77, 1030, F32, t_only));  // 32 x 32
      }
      t.push_back(fp8_gather_cast_case(300, 200));
      t.push_back(fp8_gather_cast_case(320, 200));    // the 64 x 64 transpose, partial tiles
      t.push_back(fp8_gather_cast_case(1024, 4096));  // gpt-350m's w2
      t.push_back(fp8_each_case());
      // e4m3 x e4m3 (forward) and an e5m2 operand (backward's gradients).
      t.push_back(linear_fp8_case(256, 192, 128, Fp8::e4m3, Fp8::e4m3));
      t.push_back(linear_fp8_case(128, 64, 320, Fp8::e5m2, Fp8::e4m3));
      t.push_back(linear_fp8_case(256, 192, 128, Fp8::e4m3, Fp8::e4m3, /*residual=*/true));
      t.push_back(linear_backward_fp8_case(256, 192, 128, false, F32));
      t.push_back(linear_backward_fp8_case(128, 64, 320, true, BF));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      const ModelConfig& c = m.c;
      const int M = m.M(), d = c.d_model;
      struct Proj {
        const char* name;
        int N, K;
      };
      // The block projections as FP8 GEMMs (issue 13's forward), and the
      // per-tensor cast of an activation that feeds them.
      for (Proj p : {Proj{"wq|wk|wv", m.qkv(), d}, Proj{"wo", d, c.q_dim()},
                     Proj{"w1|w3", 2 * c.d_ff, d}, Proj{"w2", d, c.d_ff}}) {
        t.push_back(linear_fp8_case(M, p.N, p.K, Fp8::e4m3, Fp8::e4m3));
        t.back().variant = std::string(p.name) + ", " + t.back().variant;
        t.push_back(linear_backward_fp8_case(M, p.N, p.K, false, F32));
        t.back().variant = std::string(p.name) + ", " + t.back().variant;
      }
      t.push_back(linear_fp8_case(M, d, c.d_ff, Fp8::e4m3, Fp8::e4m3, /*residual=*/true));
      t.back().variant = "w2, " + t.back().variant;
      t.push_back(quantize_fp8_case(int64_t(M) * d, Fp8::e4m3, BF));
      t.push_back(quantize_fp8_t_case(M, d, Fp8::e4m3, BF));
      t.push_back(quantize_fp8_t_case(M, c.d_ff, Fp8::e4m3, BF));
      // A block input's cast in training: codes for the forward GEMM and the
      // transposed codes the backward keeps (h1 and h2; s); s's transposed codes
      // alone under --recompute mlp.
      t.push_back(quantize_fp8_t_amax_case(M, d, BF, /*t_only=*/false));
      t.push_back(quantize_fp8_t_amax_case(M, c.d_ff, BF, /*t_only=*/false));
      t.push_back(quantize_fp8_t_amax_case(M, c.d_ff, BF, /*t_only=*/true));
      // The packed gradients: dA|dB by SwiGLU's amax, dq|dk|dv by its own.
      t.push_back(quantize_fp8_t_amax_case(M, 2 * c.d_ff, BF, /*t_only=*/false));
      t.push_back(quantize_fp8_t_case(M, m.qkv(), Fp8::e4m3, BF));
    });

}  // namespace fsdp::test
