// --document-mask: the documents find_documents sees in a micro-batch, in
// both of its forms (a start per token, each document's first token), and
// the attention front door's checks of them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "model/cpu/cpu_ops.h"
#include "model/documents.h"
#include "tests/common/error_of.h"

namespace fsdp {
namespace {

constexpr int kEnd = 9;

// Two sequences of 5: a one-token document, one of three, one the end-of-
// text at the sequence's last token cuts short (the next sequence starts its
// own), then a sequence whose last token ends a document: nothing follows it.
TEST(Documents, StartAfterEachEndAndAtEachSequence) {
  const std::vector<int32_t> tokens = {kEnd, 4, 4, kEnd, 4, /**/ 4, 4, 4, 4, kEnd};
  DocumentsHost d;
  find_documents(tokens.data(), 2, 5, kEnd, d);
  EXPECT_EQ(d.start, (std::vector<int32_t>{0, 1, 1, 1, 4, 0, 0, 0, 0, 0}));
  EXPECT_EQ(d.first, (std::vector<int32_t>{0, 1, 4, 5, 10}));
}

// Without an end-of-text, one document per sequence; every token one.
TEST(Documents, OnePerSequenceToOnePerToken) {
  DocumentsHost d;
  const std::vector<int32_t> none(6, 1), all(6, kEnd);
  find_documents(none.data(), 3, 2, kEnd, d);
  EXPECT_EQ(d.start, (std::vector<int32_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(d.first, (std::vector<int32_t>{0, 2, 4, 6}));
  find_documents(all.data(), 3, 2, kEnd, d);  // reused: no earlier document stays
  EXPECT_EQ(d.start, (std::vector<int32_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_EQ(d.first, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
}

// The front door takes between one document per sequence and one per token,
// each with its first token, and an i32 start per token.
TEST(Documents, AttentionChecksThemAtTheDoor) {
  CpuOps ops;
  const int B = 2, T = 4, H = 1, hd = 2;
  std::vector<float> q(B * T * hd, 0.5f), out(q.size()), lse(B * T);
  std::vector<int32_t> start = {0, 1, 1, 1, 0, 0, 0, 0}, first = {0, 1, 4, 8};
  auto f = [](std::vector<float>& v) { return Tensor{v.data(), DType::f32, int64_t(v.size())}; };
  auto i = [](std::vector<int32_t>& v, int64_t n) { return Tensor{v.data(), DType::i32, n}; };
  auto call = [&](const Documents& d) {
    return testing::error_of(
        [&] { ops.attention(f(out), f(lse), f(q), f(q), f(q), B, T, H, H, hd, hd, d); });
  };
  EXPECT_EQ(call({i(start, 8), i(first, 4)}), "");
  const std::string fewer = call({i(start, 8), i(first, 2)});  // one document in two sequences
  EXPECT_NE(fewer.find("attention: 1 documents in 2 sequences of 4 tokens"), std::string::npos)
      << fewer;
  const std::string short_start = call({i(start, 7), i(first, 4)});
  EXPECT_NE(short_start.find("attention document starts has 7 elements, the op needs 8"),
            std::string::npos)
      << short_start;
  const std::string f32_first = call({i(start, 8), Tensor{q.data(), DType::f32, 4}});
  EXPECT_NE(f32_first.find("attention documents' first tokens is f32"), std::string::npos)
      << f32_first;
}

}  // namespace
}  // namespace fsdp
