// A tensor's checksum in a checkpoint file: the wrapping sum, over its
// elements in row-major order, of mix64(index << 32 | float32 bits). A sum
// does not care which rank moved which slice or in what pieces, so each rank
// hashes what it moved and one all-reduce gives the tensor's checksum on any
// world size. tools/checkpoint_writer.py computes the same in NumPy.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fsdp::ckpt {

// The checksum of `n` consecutive elements of one tensor, the first of which
// sits at row-major index `first`.
uint64_t checksum_of(uint64_t first, const float* values, size_t n);

}  // namespace fsdp::ckpt
