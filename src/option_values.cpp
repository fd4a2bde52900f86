#include "src/option_values.h"

#include <charconv>
#include <cmath>
#include <limits>

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

}  // namespace fsdp
