#include "src/policy/divergence.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace fsdp {

bool same_rerun_value(double first, double rerun, double tolerance) {
  if (std::isnan(first) || std::isnan(rerun)) return std::isnan(first) && std::isnan(rerun);
  if (first == rerun) return true;
  if (!std::isfinite(first) || !std::isfinite(rerun)) return false;
  return std::abs(first - rerun) <= tolerance * std::max(std::abs(first), std::abs(rerun));
}

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t h = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + h, v.end());
  const double upper = v[h];
  if (v.size() % 2) return upper;
  return (*std::max_element(v.begin(), v.begin() + h) + upper) / 2;
}

std::string SpikeDetector::judge(double loss, double grad_norm) const {
  if (!std::isfinite(loss)) return "its loss is not finite";
  if (!std::isfinite(grad_norm)) return "its gradient norm is not finite";
  if (factor_ <= 0 || int(recent_.size()) < window_) return "";
  const double median = median_of(recent_);
  if (loss <= double(factor_) * median) return "";
  char why[160];
  std::snprintf(why, sizeof why,
                "its loss is %.2f times %.4f, the median of the last %d steps (--spike-factor %g)",
                loss / median, median, window_, double(factor_));
  return why;
}

void SpikeDetector::accept(double loss) {
  recent_.push_back(loss);
  if (int(recent_.size()) > window_) recent_.erase(recent_.begin());
}

void SpikeDetector::restore(const std::vector<double>& history) {
  const size_t keep = std::min(history.size(), size_t(window_));
  recent_.assign(history.end() - keep, history.end());
}

}  // namespace fsdp
