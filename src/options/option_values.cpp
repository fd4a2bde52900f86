#include "src/options/option_values.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

namespace fsdp {

namespace {

// A leading '+' is accepted as Boost's lexical_cast did; from_chars refuses it.
std::string_view without_plus(std::string_view t) {
  return t.size() > 1 && t[0] == '+' && t[1] != '-' ? t.substr(1) : t;
}

template <typename T>
std::string to_text(T v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

template <typename T>
std::string parse_integer(std::string_view text, T& out, const char* what) {
  const std::string_view t = without_plus(text);
  T v{};
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range)
    return std::string("must be ") + what + " of at most " + to_text(std::numeric_limits<T>::max());
  if (ec != std::errc() || end != t.data() + t.size()) return std::string("must be ") + what;
  out = v;
  return "";
}

constexpr double kMaxDurationSeconds = 366.0 * 24 * 3600;  // a year: beyond it, a typo

// A non-negative finite decimal, the whole text.
bool parse_seconds(std::string_view t, double& out) {
  if (t.empty()) return false;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  return ec == std::errc() && end == t.data() + t.size() && std::isfinite(out) && out >= 0;
}

// H:MM:SS or M:SS in whole numbers, as Slurm's --time writes them.
bool parse_clock(std::string_view t, double& out) {
  double total = 0;
  int parts = 0;
  while (true) {
    const size_t colon = t.find(':');
    const std::string_view part = t.substr(0, colon);
    double v = 0;
    // Minutes and seconds after the first field are two digits below 60.
    if (!parse_seconds(part, v) || v != std::floor(v) ||
        (parts > 0 && (part.size() != 2 || v >= 60)))
      return false;
    total = total * 60 + v;
    ++parts;
    if (colon == std::string_view::npos) break;
    t.remove_prefix(colon + 1);
  }
  if (parts < 2 || parts > 3) return false;
  out = total;
  return true;
}

}  // namespace

std::string parse_value(std::string_view text, int& out) {
  return parse_integer(text, out, "an integer");
}

std::string parse_value(std::string_view text, uint64_t& out) {
  return parse_integer(text, out, "a non-negative integer");
}

std::string parse_value(std::string_view text, float& out) {
  const std::string_view t = without_plus(text);
  float v = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) return "must be a number within float range";
  if (ec == std::errc() && !std::isfinite(v)) return "must be a finite number";
  if (ec != std::errc() || end != t.data() + t.size()) return "must be a number";
  out = v;
  return "";
}

std::string parse_value(std::string_view text, bool& out) {
  // The spellings Boost.ProgramOptions accepts for a bool.
  for (const char* yes : {"true", "1", "yes", "on"})
    if (text == yes) return out = true, "";
  for (const char* no : {"false", "0", "no", "off"})
    if (text == no) return out = false, "";
  return "choose true or false";
}

std::string parse_value(std::string_view text, std::string& out) {
  out = std::string(text);
  return "";
}

std::string parse_value(std::string_view text, std::vector<std::string>& out) {
  out.emplace_back(text);
  return "";
}

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
    if (scale == 0 || !parse_seconds(text.substr(0, text.size() - 1), v)) return rule;
    seconds = v * scale;
  }
  if (seconds <= 0) return "must be positive (leave it out, or 0, for no budget)";
  if (seconds > kMaxDurationSeconds) return "must be at most a year (366 days)";
  out.seconds = seconds;
  return "";
}

std::string format_value(int v) {
  return to_text(v);
}
std::string format_value(uint64_t v) {
  return to_text(v);
}
std::string format_value(float v) {
  // Shortest round-trip digits in %g's style: 500000 and 0.0002, not 5e+05, 2e-04.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}
std::string format_value(bool v) {
  return v ? "true" : "false";
}
std::string format_value(const std::string& v) {
  return v;
}
std::string format_value(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : "\n") + x;
  return s;
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
  return to_text(s) + "s";  // shortest text that reads back as the same double
}

}  // namespace fsdp
