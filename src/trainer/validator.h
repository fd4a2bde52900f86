// Validation: the mean loss over the validation split's windows (or its
// first --eval-batches batches), on --eval-every's cadence and at the last
// step of training, or as --eval-only's whole run. Forwards only, at its own
// context (--eval-seq-len) in the training activations.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "comm/communicator.h"
#include "data/batch_loader.h"
#include "data/token_stream.h"
#include "src/options/options.h"
#include "src/trainer/checkpointing.h"
#include "src/trainer/forward_pass.h"
#include "src/trainer/metrics.h"

namespace fsdp {

class Validator {
 public:
  // Reads this rank's share of `data`'s windows; `world` sums the losses.
  Validator(const Options& o, const TokenStream& data, ForwardPass pass, Communicator& world,
            int rank, int world_size, MetricsLog& metrics, bool lead);

  // Whether applied step `done` validates: --eval-every's period, or the
  // last step. A run also validates before its first step where it starts
  // from step 0 under --eval-every (the curve's first point), or where a
  // --time-budget still has to time one.
  bool due(int done, bool last) const;
  bool due_at_start(int64_t step, bool budget_times_one) const;

  // One forward at validation's shape, so that the graphs it needs are
  // built in the warm-up, before the first step.
  void warm_up();
  // One validation after `done` steps: its loss, written to the metrics with
  // the training seconds so far (a time-to-loss curve's clock) and printed.
  // Collective.
  double validate(int done, double train_s, const std::string& steps_text);
  double last_seconds() const { return seconds_; }
  // --eval-only: the loaded weights' loss, printed and written to the metrics
  // with the step they were saved at; returns (that step, the loss).
  // Collective.
  std::pair<int64_t, double> evaluate_only(const RunPosition& pos);

  int64_t windows() const { return batches_.windows(); }

 private:
  // --eval-batches 0, or more batches than one pass over the split holds.
  bool whole_split() const;
  void use_validation_shape(bool validation);
  // Mean validation loss; `tokens` (if given) gets how many it covered.
  double evaluate(double* tokens = nullptr);

  const Options& o_;
  ForwardPass pass_;
  ValBatches batches_;
  Communicator& world_;
  MetricsLog& metrics_;
  bool lead_;
  double seconds_ = 0;  // the last validation's
};

}  // namespace fsdp
