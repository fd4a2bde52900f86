// Communicator's front door: what every backend must refuse is refused before
// the backend's do_ method runs, with one message for all backends (no MPI
// here: a counting backend of two ranks stands behind the door).
#include "comm/communicator.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/common/error_of.h"

namespace fsdp {
namespace {

using testing::error_of;

class CountingCommunicator final : public Communicator {
 public:
  int calls = 0;
  int rank() const override { return 1; }
  int size() const override { return 2; }
  const char* backend_name() const override { return "counting"; }

 private:
  WorkHandle done() {
    ++calls;
    return join_work({});
  }
  WorkHandle do_all_gather(const void*, void*, size_t, DType) override { return done(); }
  WorkHandle do_reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override {
    return done();
  }
  WorkHandle do_all_reduce(void*, size_t, DType, ReduceOp) override { return done(); }
  WorkHandle do_broadcast(void*, size_t, DType, int) override { return done(); }
  WorkHandle do_barrier() override { return done(); }
  std::unique_ptr<Communicator> do_split(int, int) override {
    ++calls;
    return nullptr;
  }
};

// The message names what was wrong (internal checks add their call site).
::testing::AssertionResult says(const std::string& message, const std::string& what) {
  if (message.find(what) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << message << "' does not say '" << what << "'";
}

TEST(CommunicatorFront, RefusesBeforeTheBackendRuns) {
  CountingCommunicator c;
  std::vector<float> buf(8);
  // In place (this rank's block inside recv) and apart are both fine.
  c.all_gather(buf.data() + 2, buf.data(), 2, DType::f32);
  c.all_gather(buf.data(), buf.data() + 4, 2, DType::f32);
  c.reduce_scatter(buf.data(), buf.data() + 4, 2, DType::f32, ReduceOp::avg);
  c.broadcast(buf.data(), 8, DType::f32, 1);
  ASSERT_EQ(c.calls, 4);

  EXPECT_TRUE(says(error_of([&] { c.all_gather(buf.data() + 1, buf.data(), 2, DType::f32); }),
                   "all_gather buffers overlap without being in place"));
  EXPECT_TRUE(says(
      error_of([&] { c.reduce_scatter(buf.data(), buf.data() + 2, 2, DType::f32, ReduceOp::sum); }),
      "reduce_scatter buffers overlap"));
  EXPECT_TRUE(says(error_of([&] { c.all_reduce(buf.data(), 4, DType::u8, ReduceOp::max); }),
                   "u8 (FP8) tensors are gathered, never reduced"));
  EXPECT_TRUE(says(error_of([&] { c.all_reduce(buf.data(), 4, DType::i32, ReduceOp::avg); }),
                   "ReduceOp avg needs f32 or bf16, got i32"));
  EXPECT_TRUE(says(error_of([&] { c.broadcast(buf.data(), 8, DType::f32, 2); }),
                   "broadcast root 2 is not a rank of a group of 2"));
  EXPECT_TRUE(says(error_of([&] { c.split(-1, 0); }), "every rank must belong to a sub-group"));
  EXPECT_EQ(c.calls, 4);  // none of the refused calls reached the backend
}

}  // namespace
}  // namespace fsdp
