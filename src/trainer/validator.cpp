// Validator (validator.h): the validation loss during training and under
// --eval-only.
#include "src/trainer/validator.h"

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/error.h"
#include "src/policy/cadence.h"

namespace fsdp {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

// A validation micro-batch: --eval-seq-len's context, in as many sequences as
// the training micro-batch has tokens for (EvalOptions::micro_batch), so it
// needs no memory of its own; cuDNN builds its attention graph once for it.
Validator::Validator(const Options& o, const TokenStream& data, ForwardPass pass,
                     Communicator& world, int rank, int world_size, MetricsLog& metrics, bool lead)
    : o_(o),
      pass_(pass),
      batches_(data, o.eval.context(o.data.seq_len),
               o.eval.micro_batch(o.data.batch_size, o.data.seq_len), rank, world_size),
      world_(world),
      metrics_(metrics),
      lead_(lead) {
  if (lead_ && o_.eval.batches > 0 && whole_split())
    std::printf(
        "fsdptrain: --eval-batches %d reaches past the validation split (%lld windows, %lld "
        "batch(es) a rank): validating on the whole split, each window once\n",
        o_.eval.batches, (long long)batches_.windows(), (long long)batches_.batches_per_pass());
}

bool Validator::due(int done, bool last) const {
  return last || every(o_.eval.every, done);
}

bool Validator::due_at_start(int64_t step, bool budget_times_one) const {
  return (o_.eval.every > 0 && step == 0) || budget_times_one;
}

void Validator::use_validation_shape(bool validation) {
  const int T = o_.data.seq_len, B = o_.data.batch_size;
  if (validation)
    pass_.model.set_shape(o_.eval.micro_batch(B, T), o_.eval.context(T));
  else
    pass_.model.set_shape(B, T);
}

void Validator::warm_up() {
  use_validation_shape(true);
  pass_.model.set_batch(pass_.inputs.data(), pass_.targets.data(), 0.0f);
  pass_.engine.forward_only();
  use_validation_shape(false);
}

// Whether validation covers the whole split: --eval-batches 0, or a count of
// batches that reaches past the split's last window. Those batches would wrap
// around and count windows twice; instead every window counts once, the last
// batches padded (issue 65: 3,730 tokens were reported as 16384).
bool Validator::whole_split() const {
  return o_.eval.batches == 0 || o_.eval.batches >= batches_.batches_per_pass();
}

double Validator::evaluate(double* tokens) {
  double loss_sum = 0, count = 0;
  const bool once = whole_split();
  const int64_t batches = once ? batches_.batches_per_pass() : o_.eval.batches;
  use_validation_shape(true);
  for (int64_t i = 0; i < batches; ++i) {
    batches_.get(i, pass_.inputs.data(), pass_.targets.data(), once);
    pass_.model.set_batch(pass_.inputs.data(), pass_.targets.data(), 0.0f);
    pass_.engine.forward_only();
    loss_sum += pass_.model.loss_sum();
    count += double(pass_.model.loss_count());
  }
  use_validation_shape(false);
  float v[2] = {float(loss_sum), float(count)};
  world_.all_reduce(v, 2, DType::f32, ReduceOp::sum)->wait();
  if (tokens) *tokens = v[1];
  return double(v[0]) / double(v[1]);
}

double Validator::validate(int done, double train_s, const std::string& steps_text) {
  const auto t0 = std::chrono::steady_clock::now();
  const double v = evaluate();
  seconds_ = seconds_since(t0);
  metrics_.write({{"step", std::to_string(done)},
                  {"val_loss", json_number(v)},
                  {"train_s", json_number(train_s)}});
  if (lead_) std::printf("step %5d/%s | val_loss %.4f\n", done, steps_text.c_str(), v);
  return v;
}

std::pair<int64_t, double> Validator::evaluate_only(const RunPosition& pos) {
  if (!o_.checkpoint.resume.empty() && pos.resumed_from.empty() && pos.initialised_from.empty())
    throw_agreed_error("--eval-only --resume auto: no checkpoint in '", o_.checkpoint.dir,
                       "' to evaluate; name one with --resume PATH, or leave out --resume to "
                       "evaluate the initial weights");
  const auto t0 = std::chrono::steady_clock::now();
  double tokens = 0;
  const double v = evaluate(&tokens);
  const double seconds = seconds_since(t0);
  // The weights' own step: a resumed file's, or the one --init-from's was saved at.
  const int64_t step = pos.initialised_from.empty() ? pos.step : pos.initialised_step;
  const std::string source = !pos.resumed_from.empty()       ? pos.resumed_from
                             : !pos.initialised_from.empty() ? pos.initialised_from
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
        whole_split() ? " (the whole split)" : "", seconds);
  return {step, v};
}

}  // namespace fsdp
