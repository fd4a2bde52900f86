#include "model/documents.h"

#include "common/error.h"

namespace fsdp {

void find_documents(const int32_t* tokens, int B, int T, int eos_id, DocumentsHost& out) {
  FSDP_CHECK(B >= 1 && T >= 1 && eos_id >= 0, "documents of ", B, " x ", T, " tokens, eos ",
             eos_id);
  const int64_t n = int64_t(B) * T;
  out.start.resize(size_t(n));
  out.first.clear();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = i % T;
    const bool starts = t == 0 || tokens[i - 1] == eos_id;
    out.start[size_t(i)] = starts ? int32_t(t) : out.start[size_t(i - 1)];
    if (starts) out.first.push_back(int32_t(i));
  }
  out.first.push_back(int32_t(n));
}

}  // namespace fsdp
