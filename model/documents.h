// --document-mask: the documents packed into a micro-batch. A sequence of the
// batch starts a document at its first token and after each end-of-text
// token, so every document lies inside one sequence and together they tile
// the batch's B*T tokens in order.
//
// Attention reads them in the form its backend wants: the CPU reference a
// start per token (a row's first visible key), cuDNN's ragged (THD)
// attention each document's first token and the count, which sizes its
// graph on the host. find_documents makes both from the same tokens, so they
// cannot disagree.
#pragma once

#include <cstdint>
#include <vector>

#include "model/tensor.h"

namespace fsdp {

struct Documents {
  Tensor start;  // i32[B*T]: where each token's document starts within its sequence
  Tensor first;  // i32[count + 1]: each document's first token (an index into B*T), then B*T
  bool empty() const { return start.numel == 0; }
  int count() const { return first.numel > 0 ? int(first.numel - 1) : 0; }
};

// The documents of B sequences of T tokens whose documents end at eos_id: the
// host forms of Documents::start and Documents::first.
struct DocumentsHost {
  std::vector<int32_t> start, first;
};
void find_documents(const int32_t* tokens, int B, int T, int eos_id, DocumentsHost& out);

}  // namespace fsdp
