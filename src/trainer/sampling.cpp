#include "src/trainer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"
#include "data/text_encoder.h"

namespace fsdp {

int32_t pick_token(const std::vector<float>& logits, float temperature, int top_k,
                   std::mt19937_64& rng) {
  FSDP_CHECK(!logits.empty(), "pick_token on empty logits");
  const int V = int(logits.size());
  auto key = [&](int i) { return std::isnan(logits[size_t(i)]) ? -INFINITY : logits[size_t(i)]; };
  // Indices by descending logit, equal ones by index: the order is total.
  std::vector<int> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  const int k = top_k > 0 && top_k < V ? top_k : V;
  auto before = [&](int a, int b) { return key(a) > key(b) || (key(a) == key(b) && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), before);
  if (temperature <= 0.0f || k == 1) return order[0];
  // Softmax over the k kept, in double, shifted by the largest for range.
  const double top = key(order[0]);
  std::vector<double> w(static_cast<size_t>(k));
  double total = 0;
  for (int j = 0; j < k; ++j) {
    const double x = key(order[size_t(j)]);
    w[size_t(j)] = std::isfinite(x) ? std::exp((x - top) / temperature) : 0.0;
    total += w[size_t(j)];
  }
  if (!(total > 0)) return order[0];
  const double u = std::uniform_real_distribution<double>(0.0, total)(rng);
  double acc = 0;
  for (int j = 0; j < k; ++j) {
    acc += w[size_t(j)];
    if (u < acc) return order[size_t(j)];
  }
  return order[size_t(k - 1)];
}

std::vector<std::vector<int32_t>> sample_prompts(const std::vector<std::string>& texts,
                                                 const TokenStream& data, int seq_len) {
  std::vector<int32_t> start;
  if (data.eos_id()) start.push_back(*data.eos_id());
  if (texts.empty()) {
    if (start.empty()) {
      start.resize(size_t(std::min<int64_t>({8, seq_len / 4, data.size()})));
      data.read(0, int64_t(start.size()), start.data());
    }
    return {start};
  }
  std::string why_not;
  const std::optional<TextEncoder> encoder =
      TextEncoder::open(data.tokenizer_id(), data.eos_id(), &why_not);
  if (!encoder) throw_error("--prompt: ", why_not);
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& text : texts) {
    std::vector<int32_t> ids = start;
    try {
      for (int32_t id : encoder->encode(text)) ids.push_back(id);
    } catch (const Error& e) {
      throw_error("--prompt: ", e.what());
    }
    if (int64_t(ids.size()) >= seq_len)
      throw_error("--prompt '", text, "' is ", ids.size(), " tokens",
                  start.empty() ? "" : " with the end-of-text token before it",
                  ", which leaves no room for a new one within --seq-len ", seq_len,
                  "; shorten it or raise --seq-len");
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

}  // namespace fsdp
