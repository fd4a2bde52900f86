// What the Trainer does with the weights besides training them: validation
// (during training and --eval-only) and text samples. Both run forwards only,
// validation at its own context (--eval-seq-len) in the training activations.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "src/sampling.h"
#include "src/trainer.h"

namespace fsdp {

// A validation micro-batch: --eval-seq-len's context, in as many sequences as
// the training micro-batch has tokens for (EvalOptions::micro_batch), so it
// needs no memory of its own; cuDNN builds its attention graph once for it.
void Trainer::use_validation_shape(bool validation) {
  const int T = o_.data.seq_len, B = o_.data.batch_size;
  if (validation)
    model_->set_shape(o_.eval.micro_batch(B, T), o_.eval.context(T));
  else
    model_->set_shape(B, T);
}

// Whether validation covers the whole split: --eval-batches 0, or a count of
// batches that reaches past the split's last window. Those batches would wrap
// around and count windows twice; instead every window counts once, the last
// batches padded (issue 65: 3,730 tokens were reported as 16384).
bool Trainer::validates_whole_split() const {
  return o_.eval.batches == 0 || o_.eval.batches >= val_batches_->batches_per_pass();
}

double Trainer::evaluate(double* tokens) {
  double loss_sum = 0, count = 0;
  const bool once = validates_whole_split();
  const int64_t batches = once ? val_batches_->batches_per_pass() : o_.eval.batches;
  use_validation_shape(true);
  for (int64_t i = 0; i < batches; ++i) {
    val_batches_->get(i, inputs_.data(), targets_.data(), once);
    model_->set_batch(inputs_.data(), targets_.data(), 0.0f);
    engine_->forward_only();
    loss_sum += model_->loss_sum();
    count += double(model_->loss_count());
  }
  use_validation_shape(false);
  auto [s, c] = global_sum(loss_sum, count);
  if (tokens) *tokens = c;
  return s / c;
}

// One validation at `steps_done`: recorded in the summary and the metrics
// with the training seconds so far (a time-to-loss curve's clock), printed.
void Trainer::validate(int steps_done, TrainSummary& summary) {
  if (!val_batches_) return;
  const auto t0 = std::chrono::steady_clock::now();
  const double v = evaluate();
  eval_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary.val_loss.emplace_back(steps_done, v);
  metrics_.write({{"step", std::to_string(steps_done)},
                  {"val_loss", json_number(v)},
                  {"train_s", json_number(train_seconds_)}});
  if (lead_) std::printf("step %5d/%s | val_loss %.4f\n", steps_done, steps_text().c_str(), v);
}

// --eval-only: the validation loss of the loaded weights, printed and written
// to the metrics with the step they were saved at.
void Trainer::evaluate_only(TrainSummary& summary) {
  if (!o_.checkpoint.resume.empty() && pos_.resumed_from.empty() && pos_.initialised_from.empty())
    throw_agreed_error("--eval-only --resume auto: no checkpoint in '", o_.checkpoint.dir,
                       "' to evaluate; name one with --resume PATH, or leave out --resume to "
                       "evaluate the initial weights");
  const auto t0 = std::chrono::steady_clock::now();
  double tokens = 0;
  const double v = evaluate(&tokens);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The weights' own step: a resumed file's, or the one --init-from's was saved at.
  const int64_t step = pos_.initialised_from.empty() ? pos_.step : pos_.initialised_step;
  summary.val_loss.emplace_back(int(step), v);
  const std::string source = !pos_.resumed_from.empty()       ? pos_.resumed_from
                             : !pos_.initialised_from.empty() ? pos_.initialised_from
                                                              : "initial weights";
  metrics_.write({{"step", std::to_string(step)},
                  {"val_loss", json_number(v)},
                  {"eval_tokens", json_number(tokens)},
                  {"eval_only", "true"},
                  {"weights", json_string(source)}});
  if (lead_)
    std::printf(
        "fsdptrain: eval of %s (step %lld): val_loss %.4f, perplexity %.2f, over %.0f tokens%s "
        "in %.1f s\n",
        source.c_str(), (long long)step, v, std::exp(v), tokens,
        validates_whole_split() ? " (the whole split)" : "", seconds);
}

// Text from the current weights, as llm.c prints while it trains. Every rank
// runs the same forwards (the weights are gathered collectively); rank 0's
// first rows are the samples, --samples of each prompt (prompts_: --prompt,
// else a fresh document). There is no KV cache: each new token costs one
// forward of the micro-batch, which is cheap next to training. Rows whose
// prompts differ in length start drawing at different positions; more
// samples than --batch-size take more rounds of the micro-batch. The random
// draws run on in one stream across rounds.
void Trainer::print_samples(int step) {
  const SampleOptions& so = o_.sample;
  if (so.count == 0) return;
  const int T = o_.data.seq_len, B = o_.data.batch_size;
  const int total = so.count * int(prompts_.size());
  const auto prompt_of = [&](int sample) -> const std::vector<int32_t>& {
    return prompts_[size_t(sample / so.count)];
  };
  // New tokens of a sample: --sample-length, as far as --seq-len allows.
  const auto new_tokens = [&](int sample) {
    return std::min(so.length, T - int(prompt_of(sample).size()));
  };
  std::mt19937_64 rng(o_.run.seed * 1000003u + uint64_t(step));
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(total));
  for (int first = 0; first < total; first += B) {
    const int rows = std::min(total - first, B);
    std::fill(inputs_.begin(), inputs_.end(), 0);
    std::fill(targets_.begin(), targets_.end(), -1);
    int t_begin = T, t_end = 0;  // the positions whose logits draw a token
    for (int r = 0; r < rows; ++r) {
      const auto& p = prompt_of(first + r);
      std::copy(p.begin(), p.end(), inputs_.begin() + r * T);
      out[size_t(first + r)] = p;
      t_begin = std::min(t_begin, int(p.size()) - 1);
      t_end = std::max(t_end, int(p.size()) - 1 + new_tokens(first + r));
    }
    // Rows past the samples hold the last prompt, as they always held the one
    // prompt: under FP8 every row counts in the scale of a cast.
    const auto& last = prompt_of(first + rows - 1);
    for (int r = rows; r < B; ++r) std::copy(last.begin(), last.end(), inputs_.begin() + r * T);
    const auto draws_at = [&](int r, int t) {
      const int P = int(prompt_of(first + r).size());
      return t >= P - 1 && t < P - 1 + new_tokens(first + r);
    };
    for (int t = t_begin; t < t_end; ++t) {
      model_->set_batch(inputs_.data(), targets_.data(), 0.0f);
      std::vector<int64_t> keep;
      for (int r = 0; r < rows && lead_; ++r)
        if (draws_at(r, t)) keep.push_back(int64_t(r) * T + t);
      model_->keep_logits(std::move(keep));
      engine_->forward_only();
      if (!lead_) continue;
      for (int r = 0; r < rows; ++r) {
        if (!draws_at(r, t)) continue;
        const int32_t tok =
            pick_token(model_->logits_row(int64_t(r) * T + t), so.temperature, so.top_k, rng);
        inputs_[size_t(r) * T + t + 1] = tok;
        out[size_t(first + r)].push_back(tok);
      }
    }
  }
  if (!lead_) return;
  if (!decoder_) std::printf("fsdptrain: note: %s; samples are token ids\n", decoder_note_.c_str());
  std::string lengths;  // "N prompt token(s), M new" for each distinct prompt length
  for (size_t i = 0; i < prompts_.size(); ++i) {
    const std::string one = std::to_string(prompts_[i].size()) + " prompt token(s), " +
                            std::to_string(new_tokens(int(i) * so.count)) + " new";
    if (lengths.find(one) == std::string::npos) lengths += (lengths.empty() ? "" : "; ") + one;
  }
  std::printf("fsdptrain: %d sample(s) at step %d (temperature %g, top-k %d; %s):\n", total, step,
              double(so.temperature), so.top_k, lengths.c_str());
  for (int r = 0; r < total; ++r) {
    std::string text;
    if (decoder_) {
      text = decoder_->decode(out[size_t(r)]);
    } else {
      for (int32_t id : out[size_t(r)]) {
        if (!text.empty()) text += ' ';
        text += std::to_string(id);
      }
    }
    const int prompt = r / so.count + 1;
    if (so.prompts.empty()) {
      std::printf("--- sample %d ---\n%s\n", r + 1, text.c_str());
      metrics_.write({{"step", std::to_string(step)},
                      {"sample", std::to_string(r + 1)},
                      {"text", json_string(text)}});
      continue;
    }
    std::printf("--- sample %d (prompt %d) ---\n%s\n", r + 1, prompt, text.c_str());
    metrics_.write({{"step", std::to_string(step)},
                    {"sample", std::to_string(r + 1)},
                    {"prompt", std::to_string(prompt)},
                    {"text", json_string(text)}});
  }
  std::printf("---\n");
  std::fflush(stdout);
}

}  // namespace fsdp
