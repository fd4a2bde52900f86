#include "src/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/error.h"

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

}  // namespace fsdp
