// The op table's cases for RMSNorm (see op_table.h): forward with its max |y|,
// backward setting, adding to or overwriting dy with dx.
#include <utility>

#include "tests/model/op_table/case_util.h"

namespace fsdp::test {
namespace {

// ---- rmsnorm ----------------------------------------------------------------
enum class RmsDx { set, accumulate, alias_dy };

OpCase rmsnorm_case(int rows, int dim, RmsDx mode) {
  const int64_t n = int64_t(rows) * dim;
  const bool acc = mode == RmsDx::accumulate;
  OpCase c;
  c.op = "rmsnorm";
  c.shape = fmt("rows=%d dim=%d", rows, dim);
  // The FP8 model asks a block's norms for max |y| (its h1, h2) and max |dx|
  // (its dres); the aliasing variant keeps the kernels' paths without.
  c.variant = mode == RmsDx::set          ? "dx set, dg bf16, amax"
              : mode == RmsDx::accumulate ? "dx accumulated, dg bf16, amax"
                                          : "dx aliasing dy, dg f32";
  c.dtypes =
      mode == RmsDx::alias_dy ? "x,g,y,dy,dx bf16; rstd,dg f32" : "x,g,y,dy,dx,dg bf16; rstd f32";
  c.fwd_bytes = 2.0 * n * 2 + 2.0 * dim + 4.0 * rows;
  c.bwd_bytes = (acc ? 4.0 : 3.0) * n * 2 + 4.0 * rows + 2.0 * dim;
  c.bind = [=](Env& e) {
    const auto x = e.rnd(n, -2.0f, 2.0f), g = e.rnd(dim, 0.5f, 1.5f), dy = e.rnd(n);
    const auto dx0 = e.rnd(n), dg0 = e.rnd(dim);
    Tensor xt = e.in(BF, x), gt = e.in(BF, g), y = e.out(BF, n), r = e.out(F32, rows);
    Tensor dyt = e.in(BF, dy);
    Tensor dg = e.in(mode == RmsDx::alias_dy ? F32 : BF, dg0);
    Tensor dx = mode == RmsDx::alias_dy ? dyt : acc ? e.in(BF, dx0) : e.out(BF, n);
    const Tensor no_amax{nullptr, e.dt(F32), 0};
    const Tensor y_amax = mode == RmsDx::alias_dy ? no_amax : e.out(F32, 1);
    Ops& o = e.ops;
    Bound b;
    b.fwd = [=, &o] { o.rmsnorm(y, r, xt, gt, rows, dim, 1e-5f, y_amax); };
    b.fwd_checks = {vs_ref("rmsnorm y", y, kRound), vs_ref("rmsnorm rstd (f32)", r, kF32)};
    // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
    if (mode != RmsDx::alias_dy) b.fwd_checks.push_back(vs_ref("rmsnorm max |y|", y_amax, kRound));
    // Backward from the reference's rstd on both sides, so only backward is judged.
    b.from_ref = {r};
    const Tensor amax = mode == RmsDx::alias_dy ? no_amax : e.out(F32, 1);
    b.bwd = [=, &o] { o.rmsnorm_backward(dx, dg, dyt, xt, gt, r, rows, dim, acc, amax); };
    if (mode == RmsDx::alias_dy)
      b.bwd_checks = {vs_ref("rmsnorm dx aliasing dy", dx, kRound),
                      vs_ref("rmsnorm dg (f32, +=)", dg, kF32Sum)};
    else
      // The GPU's amax is of its bf16 values, the reference's of its f32 ones.
      b.bwd_checks = {vs_ref(acc ? "rmsnorm dx (+=)" : "rmsnorm dx", dx, kRound),
                      vs_ref("rmsnorm dg (bf16, +=)", dg, kRound),
                      vs_ref("rmsnorm max |dx|", amax, kRound)};
    b.loss = {{y, dyt}};
    b.grads = {{"dx", xt, dx, acc}, {"dg", gt, dg, /*added=*/true}};
    return b;
  };
  return c;
}

}  // namespace

FSDP_OP_FAMILY(
    "rmsnorm",
    [](std::vector<OpCase>& t) {
      // dim 40 and 16: not multiples of the vector width.
      for (auto [rows, dim] :
           {std::pair{300, 64}, std::pair{64, 1024}, std::pair{1000, 16}, std::pair{50, 40}})
        for (RmsDx m : {RmsDx::set, RmsDx::accumulate, RmsDx::alias_dy})
          t.push_back(rmsnorm_case(rows, dim, m));
      // The backward kernel's other paths, each with more rows than its grid
      // holds at once (rows per block loop): d_model 1024 keeps a row in
      // registers, 2048 reads it twice with dg in registers, 4096 keeps dg in
      // shared memory (and halves the row groups per block to fit).
      for (auto [rows, dim] : {std::pair{4500, 1024}, std::pair{4500, 2048}, std::pair{2500, 4096}})
        for (RmsDx m : {RmsDx::accumulate, RmsDx::alias_dy})
          t.push_back(rmsnorm_case(rows, dim, m));
    },
    [](std::vector<OpCase>& t, const ModelShape& m) {
      t.push_back(rmsnorm_case(m.M(), m.c.d_model, RmsDx::set));
      t.push_back(rmsnorm_case(m.M(), m.c.d_model, RmsDx::accumulate));  // a block's norms
    });

}  // namespace fsdp::test
