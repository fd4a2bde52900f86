// Communicator's front door: what every backend's collectives must hold to,
// checked once here before the backend's do_ method runs.
#include "comm/communicator.h"

#include <cstdint>

#include "common/error.h"

namespace fsdp {
namespace {

// Address ranges only, so it holds for device pointers as well as host ones.
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  auto pa = reinterpret_cast<uintptr_t>(a), pb = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// FP8 codes are moved whole, never combined; an average is a sum divided
// afterwards, only meaningful for floats.
void check_reduction(DType dtype, ReduceOp op) {
  if (dtype == DType::u8) throw_error("u8 (FP8) tensors are gathered, never reduced");
  if (op == ReduceOp::avg && dtype != DType::f32 && dtype != DType::bf16)
    throw_error("ReduceOp avg needs f32 or bf16, got ", dtype_name(dtype));
}

}  // namespace

WorkHandle Communicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  const size_t es = dtype_size(dtype);
  const bool in_place = send == static_cast<const char*>(recv) + size_t(rank()) * count * es;
  FSDP_CHECK(in_place || !overlap(send, count * es, recv, size_t(size()) * count * es),
             "all_gather buffers overlap without being in place");
  return do_all_gather(send, recv, count, dtype);
}

WorkHandle Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype,
                                        ReduceOp op) {
  check_reduction(dtype, op);
  const size_t es = dtype_size(dtype);
  FSDP_CHECK(!overlap(send, size_t(size()) * count * es, recv, count * es),
             "reduce_scatter buffers overlap");
  return do_reduce_scatter(send, recv, count, dtype, op);
}

WorkHandle Communicator::all_reduce(void* buf, size_t count, DType dtype, ReduceOp op) {
  check_reduction(dtype, op);
  return do_all_reduce(buf, count, dtype, op);
}

WorkHandle Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  if (root < 0 || root >= size())
    throw_error("broadcast root ", root, " is not a rank of a group of ", size());
  return do_broadcast(buf, count, dtype, root);
}

WorkHandle Communicator::barrier() {
  return do_barrier();
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  FSDP_CHECK(color >= 0, "every rank must belong to a sub-group");
  return do_split(color, key);
}

}  // namespace fsdp
