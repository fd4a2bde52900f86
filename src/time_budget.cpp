#include "src/time_budget.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace fsdp {

namespace {

constexpr double kMaxBudgetSeconds = 366.0 * 24 * 3600;  // a year: beyond it, a typo

// A non-negative finite decimal, the whole text.
bool parse_number(std::string_view t, double& out) {
  if (t.empty()) return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  return ec == std::errc() && end == t.data() + t.size() && std::isfinite(out) && out >= 0;
}

// H:MM:SS or M:SS, as Slurm's --time writes them.
bool parse_clock(std::string_view t, double& out) {
  double total = 0;
  int parts = 0;
  while (true) {
    const size_t colon = t.find(':');
    const std::string_view part = t.substr(0, colon);
    double v = 0;
    // Minutes and seconds after the first field are two digits below 60.
    if (!parse_number(part, v) || (parts > 0 && (part.size() != 2 || v >= 60))) return false;
    total = total * 60 + v;
    ++parts;
    if (colon == std::string_view::npos) break;
    t.remove_prefix(colon + 1);
  }
  if (parts < 2 || parts > 3) return false;
  out = total;
  return true;
}

std::string number_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace

std::string parse_value(std::string_view text, Duration& out) {
  const char* rule =
      "must be a duration: 90m, 1.5h, 5400s or H:MM:SS (a number needs its unit; 0: off)";
  if (text.empty() || text == "0") return out = Duration{}, "";
  double seconds = 0;
  if (text.find(':') != std::string_view::npos) {
    if (!parse_clock(text, seconds)) return rule;
  } else {
    const char unit = text.back();
    const double scale = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : 0;
    double v = 0;
    if (scale == 0 || !parse_number(text.substr(0, text.size() - 1), v)) return rule;
    seconds = v * scale;
  }
  if (seconds <= 0) return "must be positive (leave it out, or 0, for no budget)";
  if (seconds > kMaxBudgetSeconds) return "must be at most a year (366 days)";
  out.seconds = seconds;
  return "";
}

std::string format_value(const Duration& d) {
  const double s = d.seconds;
  if (s == 0) return "";
  if (s == std::floor(s)) {
    const auto whole = int64_t(s);
    if (whole % 3600 == 0) return std::to_string(whole / 3600) + "h";
    if (whole % 60 == 0) return std::to_string(whole / 60) + "m";
    return std::to_string(whole) + "s";
  }
  return number_text(s) + "s";  // shortest text that reads back as the same double
}

BudgetPlan plan_budget_steps(const BudgetInputs& in) {
  const int64_t done = in.steps_done;
  const double step = std::max(in.step_s, 1e-9);
  const double limit = in.budget_s * (1 - kBudgetReserve);
  // Validations after `done` in a run of n steps: each multiple of
  // --eval-every, and the final one where the last step is not one of them.
  auto evals = [&](int64_t n) -> int64_t {
    if (in.eval_s <= 0) return 0;
    const int64_t e = in.eval_every;
    return (e > 0 ? n / e - done / e : 0) + (e == 0 || n % e != 0 ? 1 : 0);
  };
  auto end_of = [&](int64_t n) {
    return in.used_s + double(n - done) * step + double(evals(n)) * in.eval_s;
  };
  // The step count is an int in the schedule; far beyond any real run.
  const int64_t most = in.max_steps > 0 ? in.max_steps : int64_t(1) << 30;
  const double per_step = step + (in.eval_every > 0 ? in.eval_s / in.eval_every : 0);
  const double room = (limit - in.used_s - in.eval_s) / per_step;
  int64_t n = done + 1 + int64_t(std::clamp(room, 0.0, double(most)));
  n = std::clamp(n, done + 1, std::max(most, done + 1));
  // The estimate above spreads the validations evenly; step to the exact count.
  while (n > done + 1 && end_of(n) > limit) --n;
  while (n < most && end_of(n + 1) <= limit) ++n;
  BudgetPlan p;
  p.steps = n;
  p.end_s = end_of(n);
  p.fits = end_of(n) <= limit;
  p.capped = n == most && in.max_steps > 0 && end_of(n + 1) <= limit;
  return p;
}

}  // namespace fsdp
