// Finite-difference gradient checking, shared by the op tests and the
// whole-model gradient check. Header-only and free of GoogleTest so any test
// can use it.
//
// Usage:
//   GradCheckResult r = grad_check(loss, param, grad, n);
//   EXPECT_LT(r.worst_rel_err, 1e-2) << r.describe();
// where loss() recomputes the scalar loss (in double) from the current
// contents of param, and grad holds the analytic d loss / d param.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fsdp::test {

struct GradCheckOptions {
  // Coordinates probed; all of them when n is not larger. The coordinate with
  // the largest analytic gradient is always among them.
  int max_coords = 48;
  // Central-difference step for coordinate i: rel_step * max(|x_i|, rms(x)).
  // Relative to the parameter's scale because the loss is computed in fp32,
  // whose rounding noise divided by a too-small step swamps the derivative.
  double rel_step = 1e-2;
  // Errors are relative to max(|fd|, |analytic|, floor), with
  // floor = floor_frac * max_i |analytic_i|: a coordinate whose true gradient
  // is ~0 is judged by its absolute error against the gradient's scale.
  double floor_frac = 1e-2;
  uint64_t seed = 1;
};

struct GradCheckResult {
  double worst_rel_err = 0.0;
  int64_t worst_index = -1;
  double worst_fd = 0.0;
  double worst_analytic = 0.0;
  int checked = 0;

  std::string describe() const {
    std::ostringstream os;
    os << "worst relative error " << worst_rel_err << " at index " << worst_index
       << " (finite difference " << worst_fd << ", analytic " << worst_analytic << ") over "
       << checked << " coordinates";
    return os.str();
  }
};

// Checks grad[0..n) against central differences of loss() with respect to
// param[0..n), on a deterministic sample of coordinates. param is restored
// bit for bit after each probe.
inline GradCheckResult grad_check(const std::function<double()>& loss, float* param,
                                  const float* grad, int64_t n, const GradCheckOptions& opt = {}) {
  GradCheckResult res;
  if (n <= 0) return res;

  double sumsq = 0.0, gmax = 0.0;
  int64_t imax = 0;
  for (int64_t i = 0; i < n; ++i) {
    sumsq += double(param[i]) * param[i];
    if (std::abs(double(grad[i])) > gmax) {
      gmax = std::abs(double(grad[i]));
      imax = i;
    }
  }
  const double rms = std::sqrt(sumsq / double(n));
  const double floor = std::max(opt.floor_frac * gmax, 1e-30);

  std::vector<int64_t> coords;
  if (n <= opt.max_coords) {
    for (int64_t i = 0; i < n; ++i) coords.push_back(i);
  } else {
    coords.push_back(imax);
    std::mt19937_64 rng(opt.seed);
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    while (int(coords.size()) < opt.max_coords) {
      const int64_t i = pick(rng);
      if (std::find(coords.begin(), coords.end(), i) == coords.end()) coords.push_back(i);
    }
  }

  for (const int64_t i : coords) {
    const float x = param[i];
    const double h = opt.rel_step * std::max({std::abs(double(x)), rms, 1e-3});
    // The step actually taken is whatever the perturbed floats round to.
    const float xp = float(x + h), xm = float(x - h);
    param[i] = xp;
    const double lp = loss();
    param[i] = xm;
    const double lm = loss();
    param[i] = x;
    const double fd = (lp - lm) / (double(xp) - double(xm));
    const double an = grad[i];
    const double err = std::abs(fd - an) / std::max({std::abs(fd), std::abs(an), floor});
    ++res.checked;
    if (!(err <= res.worst_rel_err) || res.worst_index < 0) {  // NaN counts as worst
      res.worst_rel_err = std::isnan(err) ? INFINITY : err;
      res.worst_index = i;
      res.worst_fd = fd;
      res.worst_analytic = an;
    }
  }
  return res;
}

}  // namespace fsdp::test
