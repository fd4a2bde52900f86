// What the op table's family files (*_cases.cpp) share: short dtype names,
// the RoPE base, a printf-style formatter for shapes and the two kinds of
// check. Not for other users: op_table.h is the table's interface.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "tests/model/op_table/op_table.h"

namespace fsdp::test {

inline constexpr DType BF = DType::bf16, F32 = DType::f32;
inline constexpr float kTheta = 10000.0f;  // RoPE base

template <typename... A>
std::string fmt(const char* f, A... a) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a...);
  return buf;
}

// Compare t with the reference's tensor at the same place.
inline Check vs_ref(std::string what, Tensor t, Tol tol) {
  Check c;
  c.what = std::move(what);
  c.t = t;
  c.tol = tol;
  return c;
}
// Compare t with known host values (the reference is not consulted).
inline Check vs_host(std::string what, Tensor t, Tol tol, std::vector<float> want) {
  Check c = vs_ref(std::move(what), t, tol);
  c.want = std::move(want);
  return c;
}

}  // namespace fsdp::test
