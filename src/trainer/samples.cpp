// Samples (samples.h): prompts in the data's tokenizer, tokens drawn from
// the logits of plain forwards, text decoded on rank 0.
#include "src/trainer/samples.h"

#include <algorithm>
#include <cstdio>
#include <random>

#include "src/policy/cadence.h"
#include "src/trainer/sampling.h"

namespace fsdp {

Samples::Samples(const Options& o, const TokenStream& data, MetricsLog& metrics, bool lead)
    : o_(o), metrics_(metrics), lead_(lead) {
  if (o_.sample.count == 0) return;
  prompts_ = sample_prompts(o_.sample.prompts, data, o_.data.seq_len);
  if (lead_)
    decoder_ = TokenDecoder::open(data.source(0).file, o_.model.vocab_size, data.tokenizer(),
                                  &decoder_note_);
}

bool Samples::due(int done, bool last) const {
  return o_.sample.count > 0 && (last || every(o_.sample.every, done));
}

// Text from the current weights, as llm.c prints while it trains. Every rank
// runs the same forwards (the weights are gathered collectively); rank 0's
// first rows are the samples, --samples of each prompt (prompts_: --prompt,
// else a fresh document). There is no KV cache: each new token costs one
// forward of the micro-batch, which is cheap next to training. Rows whose
// prompts differ in length start drawing at different positions; more
// samples than --batch-size take more rounds of the micro-batch. The random
// draws run on in one stream across rounds.
void Samples::print(int step, ForwardPass pass) {
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
    std::fill(pass.inputs.begin(), pass.inputs.end(), 0);
    std::fill(pass.targets.begin(), pass.targets.end(), -1);
    int t_begin = T, t_end = 0;  // the positions whose logits draw a token
    for (int r = 0; r < rows; ++r) {
      const auto& p = prompt_of(first + r);
      std::copy(p.begin(), p.end(), pass.inputs.begin() + r * T);
      out[size_t(first + r)] = p;
      t_begin = std::min(t_begin, int(p.size()) - 1);
      t_end = std::max(t_end, int(p.size()) - 1 + new_tokens(first + r));
    }
    // Rows past the samples hold the last prompt, as they always held the one
    // prompt: under FP8 every row counts in the scale of a cast.
    const auto& last = prompt_of(first + rows - 1);
    for (int r = rows; r < B; ++r) std::copy(last.begin(), last.end(), pass.inputs.begin() + r * T);
    const auto draws_at = [&](int r, int t) {
      const int P = int(prompt_of(first + r).size());
      return t >= P - 1 && t < P - 1 + new_tokens(first + r);
    };
    for (int t = t_begin; t < t_end; ++t) {
      pass.model.set_batch(pass.inputs.data(), pass.targets.data(), 0.0f);
      std::vector<int64_t> keep;
      for (int r = 0; r < rows && lead_; ++r)
        if (draws_at(r, t)) keep.push_back(int64_t(r) * T + t);
      pass.model.keep_logits(std::move(keep));
      pass.engine.forward_only();
      if (!lead_) continue;
      for (int r = 0; r < rows; ++r) {
        if (!draws_at(r, t)) continue;
        const int32_t tok =
            pick_token(pass.model.logits_row(int64_t(r) * T + t), so.temperature, so.top_k, rng);
        pass.inputs[size_t(r) * T + t + 1] = tok;
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
