// OpProfiler: every op call timed in stream order, for `fsdptrain
// --profile-ops`. It is the Ops hook (model/ops.h): each call through the
// front door is bracketed by two marks of the same Ops (CUDA events on a GPU,
// the host clock on the CPU), so the table shows what the device spent per op
// while the run keeps its normal asynchrony: the marks are read only when the
// caller clears them (once per step), never in between.
//
// Rows are keyed by op and shape ("linear 8192x3072x1024"), so the same GEMM
// in every layer adds up to one row, and carry the op's nominal work (FLOPs
// for GEMMs and attention, bytes touched for the memory-bound rest) to give
// a rate to hold against the device's roofline.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "model/ops.h"

namespace fsdp {

class OpProfiler final : public OpHook {
 public:
  // Sets itself as ops' hook, and unsets it when destroyed.
  explicit OpProfiler(Ops& ops);
  ~OpProfiler() override;
  OpProfiler(const OpProfiler&) = delete;
  OpProfiler& operator=(const OpProfiler&) = delete;

  // Timing is off until enabled; disabled calls pass straight through (for
  // the first step's warm-up and for evaluation).
  void set_enabled(bool on) { enabled_ = on; }
  // Counts one profiled step, for the per-step column of the table.
  void count_step() { ++steps_; }

  struct Row {
    std::string key;  // op and shape
    long calls = 0;
    double seconds = 0, flops = 0, bytes = 0;
  };
  // Every row so far, longest total first (reads the marks still pending).
  std::vector<Row> rows();
  // The table: one line per row with ms/step, share, and TFLOP/s or GB/s;
  // rows under min_share of the total are folded into one, but for each op's
  // largest.
  std::string report(double min_share = 0.002);

  // ---- OpHook -----------------------------------------------------------------
  void begin(const OpCall& call) override;
  void end(const OpCall& call) override;
  void settle() override;  // reads pending spans into rows_

 private:
  struct Pending {
    Row* row;
    int a, b;
  };
  Ops& ops_;
  bool enabled_ = false;
  int open_ = -1;  // the mark begin() took, while an op runs
  long steps_ = 0;
  std::map<std::string, Row> rows_;
  std::vector<Pending> pending_;
};

}  // namespace fsdp
