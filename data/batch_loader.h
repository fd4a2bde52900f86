// Training and validation batches of one rank, read from a TokenStream.
//
// BatchLoader reads ahead: a background thread fills whole steps (every
// micro-batch of this rank) into a bounded queue, each step in one locked
// pass over the stream with its windows sorted by offset, so the training
// loop only copies rows out. Which windows a step holds is the sampler's pure
// function of the position (data/sampler.h), so prefetching never changes
// the data, and restore() just drops the queue and refills from the restored
// position. Memory is `prefetch_steps` steps of this rank's rows, whatever
// the size of the dataset.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "data/sampler.h"
#include "data/token_stream.h"

namespace fsdp {

struct LoaderOptions {
  // Steps held read (or being read) ahead of the caller, on a background
  // thread. 0 reads each step in the caller's thread when first asked for.
  int prefetch_steps = 2;
  // Micro-batches of step s (from 0), each in [1, grad_accum]: a step reads
  // that many micro-batches' positions and the next step goes on from there
  // (--batch-warmup-steps: src/policy/batch_warmup.h). Called on the reader
  // thread too, so it must be a pure function of s. Empty: grad_accum.
  std::function<int(int64_t)> micro_batches = {};
};

// Keeps a reference to `data`, which must outlive it. Per step:
// next_micro_batch(m, ...) for each m in [0, micro_batches()), in any order,
// then end_step(). Used from one thread (its own reader thread aside).
class BatchLoader {
 public:
  BatchLoader(const TokenStream& data, int seq_len, int batch_size, int grad_accum, int rank,
              int world, uint64_t seed, LoaderOptions options = {});
  ~BatchLoader();  // stops and joins the reader thread
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Fills inputs and targets, each [batch_size, seq_len] row-major, with
  // micro-batch `micro` of the current step. A read error (also one hit by the
  // reader thread) throws fsdp::Error here, and again on every later call.
  void next_micro_batch(int micro, int32_t* inputs, int32_t* targets);
  void end_step();

  // Global position of this rank's row `row` of micro-batch `micro` now.
  int64_t position(int micro, int row) const;
  // Global token offset of the window at `position`.
  int64_t window_start(int64_t position) const;
  // This step's micro-batches (grad_accum but in a batch warm-up) and the
  // sequences all ranks read in them.
  int micro_batches() const { return micro_batches_at(state_.step); }
  int64_t sequences_per_step() const { return sequences_at(state_.step); }
  int64_t step() const { return state_.step; }
  const Sampler& sampler() const { return sampler_; }

  SamplerState state() const { return state_; }
  // Continues from a checkpoint: its seed replaces the constructor's, so the
  // resumed run keeps the original data order. Drops what was read ahead.
  void restore(const SamplerState& state);

  // Seconds next_micro_batch spent waiting for data: in all, and within the
  // last step that end_step() closed. With prefetch and I/O faster than
  // compute, both stay near zero after the first step.
  double wait_seconds() const { return wait_total_; }
  double last_step_wait_seconds() const { return wait_last_step_; }
  // Bytes of the read-ahead buffers: fixed by the batch shape and
  // prefetch_steps, not by the dataset.
  int64_t buffer_bytes() const;

 private:
  // One step of this rank's windows, seq_len + 1 tokens each, micro-batch
  // major; `consumed` names the step.
  struct StepData {
    int64_t consumed = -1;
    int64_t step = -1;
    std::vector<int32_t> tokens;
  };

  int micro_batches_at(int64_t step) const;
  int64_t sequences_at(int64_t step) const {
    return int64_t{world_} * batch_ * micro_batches_at(step);
  }
  void fill(StepData& data, int64_t step, int64_t consumed) const;
  const StepData& current();  // the current step's data, read or waited for
  void start_reader();
  void stop_reader();
  void reader_loop();
  void drop_stale();  // caller holds mu_

  const TokenStream* data_;
  WindowIndex windows_;
  Sampler sampler_;
  int batch_, accum_, rank_, world_;
  int prefetch_;
  std::function<int(int64_t)> micro_batches_;  // LoaderOptions::micro_batches
  SamplerState state_;
  double wait_total_ = 0, wait_step_ = 0, wait_last_step_ = 0;

  std::unique_ptr<StepData> sync_step_;  // prefetch_steps == 0

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<StepData>> ready_;  // increasing `consumed`
  std::vector<std::unique_ptr<StepData>> free_;  // recycled buffers
  int64_t next_fill_ = 0;                        // `consumed` of the next step to read
  int64_t next_fill_step_ = 0;                   // and its step
  std::optional<std::string> error_;             // the reader's failure
  bool stop_ = false;
  std::thread reader_;
};

// Validation batches: windows in stream order, no shuffle, so every
// evaluation over the same batch indices sees the same tokens. Rank r's row b
// of batch i is window ((i * world + r) * batch + b) mod S_val, so the ranks
// split each evaluation between them.
class ValBatches {
 public:
  ValBatches(const TokenStream& data, int seq_len, int batch_size, int rank, int world);

  // With `once`, rows past the last window are padding (inputs 0, targets -1,
  // which the loss ignores) instead of wrapping around, so batches
  // [0, batches_per_pass()) see every window exactly once.
  void get(int64_t batch_index, int32_t* inputs, int32_t* targets, bool once = false);
  int64_t batches_per_pass() const;
  int64_t window(int64_t batch_index, int row) const;
  int64_t windows() const { return windows_.count(); }

 private:
  const TokenStream* data_;
  WindowIndex windows_;
  int seq_len_, batch_, rank_, world_;
  std::vector<int32_t> rows_;  // batch windows of seq_len + 1 tokens
};

}  // namespace fsdp
