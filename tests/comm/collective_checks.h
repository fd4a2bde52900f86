// Checks of every collective against a direct computation of what it must
// produce, shared by the suites of each Communicator implementation.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"

namespace fsdp::testing {

// Small integers, so float sums over a few ranks are exact and the expected
// results need no tolerance; different on every rank and element.
template <typename T>
T value(int rank, size_t i) {
  return T(int64_t((uint64_t(rank) * 131 + i * 7 + (i >> 10)) % 97) - 48);
}

template <typename T>
std::vector<T> pattern(int rank, size_t n, size_t offset = 0) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value<T>(rank, offset + i);
  return v;
}

template <typename T>
T reduce_over_ranks(int size, size_t i, ReduceOp op) {
  T acc = value<T>(0, i);
  for (int r = 1; r < size; ++r)
    acc = op == ReduceOp::max ? std::max(acc, value<T>(r, i)) : T(acc + value<T>(r, i));
  return op == ReduceOp::avg ? T(acc / T(size)) : acc;
}

// One EXPECT for a whole buffer: a million failures would drown the log.
template <typename T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i] && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << ": got "
                     << (bad ? got[first] : T()) << ", want " << (bad ? want[first] : T());
}

template <typename T>
constexpr DType dtype_of() {
  return std::is_same_v<T, float> ? DType::f32 : DType::i32;
}

template <typename T>
void check_all_gather(Communicator& c, size_t n, bool in_place) {
  const int p = c.size(), me = c.rank();
  std::vector<T> recv(p * n, T(-1000));
  std::vector<T> send = pattern<T>(me, n);
  if (in_place) std::copy(send.begin(), send.end(), recv.begin() + me * n);
  c.all_gather(in_place ? recv.data() + me * n : send.data(), recv.data(), n, dtype_of<T>())
      ->wait();
  std::vector<T> want;
  for (int r = 0; r < p; ++r) {
    auto block = pattern<T>(r, n);
    want.insert(want.end(), block.begin(), block.end());
  }
  expect_equal(recv, want, "all_gather n=" + std::to_string(n));
}

template <typename T>
void check_reduce_scatter(Communicator& c, size_t n, ReduceOp op) {
  const int p = c.size(), me = c.rank();
  std::vector<T> send = pattern<T>(me, p * n);
  std::vector<T> recv(n, T(-1000));
  c.reduce_scatter(send.data(), recv.data(), n, dtype_of<T>(), op)->wait();
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reduce_over_ranks<T>(p, me * n + i, op);
  expect_equal(recv, want,
               std::string("reduce_scatter ") + reduce_op_name(op) + " n=" + std::to_string(n));
}

template <typename T>
void check_all_reduce(Communicator& c, size_t n, ReduceOp op) {
  std::vector<T> buf = pattern<T>(c.rank(), n);
  c.all_reduce(buf.data(), n, dtype_of<T>(), op)->wait();
  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) want[i] = reduce_over_ranks<T>(c.size(), i, op);
  expect_equal(buf, want,
               std::string("all_reduce ") + reduce_op_name(op) + " n=" + std::to_string(n));
}

template <typename T>
void check_broadcast(Communicator& c, size_t n) {
  for (int root = 0; root < c.size(); ++root) {
    std::vector<T> buf = c.rank() == root ? pattern<T>(root, n) : std::vector<T>(n, T(-1000));
    c.broadcast(buf.data(), n, dtype_of<T>(), root)->wait();
    expect_equal(buf, pattern<T>(root, n),
                 "broadcast root " + std::to_string(root) + " n=" + std::to_string(n));
  }
}

template <typename T>
void check_everything(Communicator& c, size_t n) {
  check_all_gather<T>(c, n, false);
  check_all_gather<T>(c, n, true);
  check_reduce_scatter<T>(c, n, ReduceOp::sum);
  check_reduce_scatter<T>(c, n, ReduceOp::max);
  check_all_reduce<T>(c, n, ReduceOp::sum);
  check_all_reduce<T>(c, n, ReduceOp::max);
  check_broadcast<T>(c, n);
}

// bf16 on the host: round to nearest even, as the GPU converts.
inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Test names for (dtype, count) parameters: "f32_1000003".
inline std::string dtype_count_name(
    const ::testing::TestParamInfo<std::tuple<DType, size_t>>& info) {
  return std::string(dtype_name(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param));
}

}  // namespace fsdp::testing
