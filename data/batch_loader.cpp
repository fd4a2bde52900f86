#include "data/batch_loader.h"

#include <algorithm>
#include <chrono>
#include <exception>

#include "common/error.h"

namespace fsdp {

namespace {

// The stream, after the checks every loader needs.
const TokenStream& checked(const TokenStream& data, int seq_len, int batch, int accum, int rank,
                           int world) {
  if (seq_len < 1) throw_error("sequence length ", seq_len, " must be at least 1");
  if (batch < 1) throw_error("batch size ", batch, " must be at least 1");
  if (accum < 1) throw_error("gradient accumulation ", accum, " must be at least 1");
  FSDP_CHECK(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " of world ", world);
  data.require_min_tokens(int64_t{seq_len} + 1, "one sequence (seq_len " + std::to_string(seq_len) +
                                                    ", plus 1 for the last target)");
  return data;
}

// Splits windows of seq_len + 1 tokens into input and target rows.
void split_rows(const int32_t* windows, int rows, int seq_len, int32_t* inputs, int32_t* targets) {
  for (int b = 0; b < rows; ++b) {
    const int32_t* w = windows + int64_t{b} * (seq_len + 1);
    std::copy_n(w, seq_len, inputs + int64_t{b} * seq_len);
    std::copy_n(w + 1, seq_len, targets + int64_t{b} * seq_len);
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BatchLoader::BatchLoader(const TokenStream& data, int seq_len, int batch_size, int grad_accum,
                         int rank, int world, uint64_t seed, LoaderOptions options)
    : data_(&data),
      windows_(checked(data, seq_len, batch_size, grad_accum, rank, world), seq_len),
      sampler_(Sampler::for_windows(windows_.count(), seq_len, seed)),
      batch_(batch_size),
      accum_(grad_accum),
      rank_(rank),
      world_(world),
      prefetch_(std::max(0, options.prefetch_steps)),
      micro_batches_(std::move(options.micro_batches)),
      state_{seed, 0, 0} {
  start_reader();
}

BatchLoader::~BatchLoader() {
  stop_reader();
}

int BatchLoader::micro_batches_at(int64_t step) const {
  if (!micro_batches_) return accum_;
  const int m = micro_batches_(step);
  FSDP_CHECK(m >= 1 && m <= accum_, "step ", step, " of ", m, " micro-batches (at most ", accum_,
             ")");
  return m;
}

int64_t BatchLoader::position(int micro, int row) const {
  FSDP_CHECK(micro >= 0 && micro < micro_batches() && row >= 0 && row < batch_, "micro-batch ",
             micro, " row ", row);
  return state_.consumed + (int64_t{micro} * world_ + rank_) * batch_ + row;
}

int64_t BatchLoader::window_start(int64_t position) const {
  return windows_.start(sampler_.window_of(position));
}

int64_t BatchLoader::buffer_bytes() const {
  const int64_t step = int64_t{accum_} * batch_ * (sampler_.seq_len() + 1);
  return std::max(prefetch_, 1) * step * int64_t{sizeof(int32_t)};
}

// Runs on the reader thread too: touches only members that stay fixed while
// the thread lives (restore() stops it before changing them).
void BatchLoader::fill(StepData& data, int64_t step, int64_t consumed) const {
  const int64_t row = sampler_.seq_len() + 1;
  const int micro = micro_batches_at(step);
  data.consumed = -1;
  data.tokens.resize(static_cast<size_t>(int64_t{micro} * batch_ * row));
  std::vector<TokenRange> ranges;
  ranges.reserve(static_cast<size_t>(micro) * batch_);
  for (int m = 0; m < micro; ++m) {
    for (int b = 0; b < batch_; ++b) {
      const int64_t p = consumed + (int64_t{m} * world_ + rank_) * batch_ + b;
      ranges.push_back(
          TokenRange{window_start(p), row, data.tokens.data() + (int64_t{m} * batch_ + b) * row});
    }
  }
  data_->read(std::move(ranges));
  data.step = step;
  data.consumed = consumed;
}

void BatchLoader::drop_stale() {
  bool dropped = false;
  while (!ready_.empty() && ready_.front()->consumed < state_.consumed) {
    free_.push_back(std::move(ready_.front()));
    ready_.pop_front();
    dropped = true;
  }
  if (dropped) cv_.notify_all();
}

const BatchLoader::StepData& BatchLoader::current() {
  const auto t0 = std::chrono::steady_clock::now();
  if (prefetch_ == 0) {
    if (!sync_step_) sync_step_ = std::make_unique<StepData>();
    if (sync_step_->consumed != state_.consumed || sync_step_->step != state_.step) {
      try {
        fill(*sync_step_, state_.step, state_.consumed);
      } catch (...) {
        wait_step_ += seconds_since(t0);
        throw;
      }
      wait_step_ += seconds_since(t0);
    }
    return *sync_step_;
  }
  std::unique_lock lock(mu_);
  const auto have = [&] { return !ready_.empty() && ready_.front()->consumed == state_.consumed; };
  cv_.wait(lock, [&] {
    drop_stale();
    return have() || error_.has_value();
  });
  wait_step_ += seconds_since(t0);
  // Steps read before the failure are still served; the error comes at the
  // step that could not be read.
  if (!have()) throw Error(*error_);
  FSDP_CHECK(ready_.front()->step == state_.step, "data read for step ", ready_.front()->step,
             " at step ", state_.step);
  return *ready_.front();
}

void BatchLoader::next_micro_batch(int micro, int32_t* inputs, int32_t* targets) {
  FSDP_CHECK(micro >= 0 && micro < micro_batches(), "micro-batch ", micro, " of ", micro_batches());
  const StepData& step = current();
  const int t = sampler_.seq_len();
  split_rows(step.tokens.data() + int64_t{micro} * batch_ * (t + 1), batch_, t, inputs, targets);
}

void BatchLoader::end_step() {
  {
    std::lock_guard lock(mu_);
    state_.consumed += sequences_at(state_.step);
    ++state_.step;
    drop_stale();
  }
  cv_.notify_all();
  wait_total_ += wait_step_;
  wait_last_step_ = wait_step_;
  wait_step_ = 0;
}

void BatchLoader::restore(const SamplerState& state) {
  if (state.step < 0 || state.consumed < 0)
    throw_error("checkpoint data-sampler state is invalid (step ", state.step, ", consumed ",
                state.consumed, ")");
  stop_reader();
  sampler_ = Sampler::for_windows(windows_.count(), sampler_.seq_len(), state.seed);
  state_ = state;
  if (sync_step_) sync_step_->consumed = -1;  // read under the old seed
  start_reader();
}

void BatchLoader::start_reader() {
  if (prefetch_ == 0) return;
  std::lock_guard lock(mu_);
  for (auto& s : ready_) free_.push_back(std::move(s));
  ready_.clear();
  error_.reset();
  stop_ = false;
  next_fill_ = state_.consumed;
  next_fill_step_ = state_.step;
  reader_ = std::thread([this] { reader_loop(); });
}

void BatchLoader::stop_reader() {
  if (!reader_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  reader_.join();
}

void BatchLoader::reader_loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < prefetch_; });
    if (stop_) return;
    // Steps the caller closed without reading are skipped, not read.
    if (state_.consumed > next_fill_) next_fill_ = state_.consumed, next_fill_step_ = state_.step;
    const int64_t consumed = next_fill_, step_index = next_fill_step_++;
    next_fill_ += sequences_at(step_index);
    std::unique_ptr<StepData> step;
    if (free_.empty()) {
      step = std::make_unique<StepData>();
    } else {
      step = std::move(free_.back());
      free_.pop_back();
    }
    lock.unlock();
    std::optional<std::string> failure;
    try {
      fill(*step, step_index, consumed);
    } catch (const std::exception& e) {
      failure = e.what();
    }
    lock.lock();
    if (failure) {
      // Nothing after a failed step can be served, so the thread ends here.
      error_ = std::move(failure);
      cv_.notify_all();
      return;
    }
    ready_.push_back(std::move(step));
    cv_.notify_all();
  }
}

ValBatches::ValBatches(const TokenStream& data, int seq_len, int batch_size, int rank, int world)
    : data_(&data),
      windows_(checked(data, seq_len, batch_size, 1, rank, world), seq_len),
      seq_len_(seq_len),
      batch_(batch_size),
      rank_(rank),
      world_(world),
      rows_(static_cast<size_t>(batch_size) * (seq_len + 1)) {}

int64_t ValBatches::window(int64_t batch_index, int row) const {
  FSDP_CHECK(batch_index >= 0 && row >= 0 && row < batch_, "batch ", batch_index, " row ", row);
  return ((batch_index * world_ + rank_) * batch_ + row) % windows_.count();
}

int64_t ValBatches::batches_per_pass() const {
  const int64_t per_batch = int64_t(world_) * batch_;
  return (windows_.count() + per_batch - 1) / per_batch;
}

void ValBatches::get(int64_t batch_index, int32_t* inputs, int32_t* targets, bool once) {
  std::vector<TokenRange> ranges;
  int real = batch_;  // rows that hold a window; the rest are padding
  for (int b = 0; b < batch_; ++b) {
    if (once && (batch_index * world_ + rank_) * batch_ + b >= windows_.count()) {
      real = b;
      break;
    }
    ranges.push_back(TokenRange{windows_.start(window(batch_index, b)), seq_len_ + 1,
                                rows_.data() + int64_t{b} * (seq_len_ + 1)});
  }
  if (!ranges.empty()) data_->read(std::move(ranges));
  split_rows(rows_.data(), real, seq_len_, inputs, targets);
  const int64_t used = int64_t{real} * seq_len_, all = int64_t{batch_} * seq_len_;
  std::fill(inputs + used, inputs + all, 0);
  std::fill(targets + used, targets + all, -1);
}

}  // namespace fsdp
