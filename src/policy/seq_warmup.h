// --seq-warmup-steps: short-to-long sequence warm-up (Li, Zhang and He 2022,
// "The stability-efficiency dilemma"; issue 68). For its first steps a run
// trains on shorter contexts: each of the micro-batch's sequences of
// --seq-len tokens is cut into pieces of the step's context, each piece a
// sequence of its own (attention and positions start again in every piece).
// The tokens, their targets and the tokens per step are the step's as
// without it, so the data order, the loss's normalisation and a checkpoint's
// position do not change; only what each token may attend to does. Where
// DeepSpeed's curriculum truncates sequences (dropping the rest of each),
// nothing is dropped here, and the micro-batch keeps its memory: B x T rows
// are B*T/c rows of c.
//
// The context grows linearly from --seq-warmup-start to --seq-len over the
// warm-up, rounded down to a divisor of --seq-len so the pieces tile each
// sequence (for a power of two: doubling stages). It depends on the step
// alone, so a resumed run and the PyTorch reference (tools/torch_reference.py)
// compute the same one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fsdp {

struct SeqWarmup {
  int steps = 0;  // 0: off
  int start = 0;  // the first steps' context (0: --seq-len / 8)

  bool on() const { return steps > 0; }
  // The first context for sequences of seq_len tokens.
  int start_for(int seq_len) const { return start > 0 ? start : seq_len / 8; }
  bool operator==(const SeqWarmup&) const = default;
};

// Why a warm-up cannot run on sequences of seq_len tokens ("" when it can):
// its first context must be at least 1, below seq_len and divide it.
inline std::string seq_warmup_rule(const SeqWarmup& w, int seq_len) {
  if (!w.on()) return "";
  const int c = w.start_for(seq_len);
  if (c >= 1 && c < seq_len && seq_len % c == 0) return "";
  return "the first context (--seq-warmup-start, 0: --seq-len / 8) must be at least 1, below "
         "--seq-len " +
         std::to_string(seq_len) + " and divide it";
}

// The context of `step` (from 0): the largest divisor of seq_len not above
// start + (seq_len - start) * step / steps (integer division), seq_len once
// the warm-up is over.
inline int seq_warmup_context(const SeqWarmup& w, int64_t step, int seq_len) {
  if (!w.on() || step >= w.steps) return seq_len;
  const int start = w.start_for(seq_len);
  const int64_t ramp = start + int64_t(seq_len - start) * step / w.steps;
  int c = int(ramp);
  while (seq_len % c != 0) --c;  // reaches start at the latest: it divides seq_len
  return c;
}

// The contexts shorter than seq_len that steps from `first` on use, in
// order (none once the warm-up is over).
inline std::vector<int> seq_warmup_contexts(const SeqWarmup& w, int64_t first, int seq_len) {
  std::vector<int> out;
  for (int64_t s = first; s < w.steps; ++s) {
    const int c = seq_warmup_context(w, s, seq_len);
    if (c < seq_len && (out.empty() || out.back() != c)) out.push_back(c);
  }
  return out;
}

}  // namespace fsdp
