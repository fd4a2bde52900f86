// Option values to and from text, the same way for flags, the INI file and the
// checkpoint's copy. parse_value returns the rule the text breaks ("" when it
// converted), so the caller can name the flag and where the text came from.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "src/options/option_enums.h"

namespace fsdp {

// A length of time (--time-budget) given as 90m, 1.5h, 5400s or H:MM:SS;
// zero is "off".
struct Duration {
  double seconds = 0;

  bool operator==(const Duration&) const = default;
};

std::string parse_value(std::string_view text, int& out);
std::string parse_value(std::string_view text, uint64_t& out);
// Finite values only: inf, nan and overflow are refused for every option,
// since no option means anything with them (an infinite --lr trains NaN).
std::string parse_value(std::string_view text, float& out);
std::string parse_value(std::string_view text, bool& out);
std::string parse_value(std::string_view text, std::string& out);
// A repeatable option (--prompt): each given value is appended.
std::string parse_value(std::string_view text, std::vector<std::string>& out);
// "" or "0" is off; a bare number needs a unit (Slurm reads "90" as minutes,
// a reader of seconds would not, so neither is guessed).
std::string parse_value(std::string_view text, Duration& out);

template <typename E>
requires std::is_enum_v<E> std::string parse_value(std::string_view text, E& out) {
  const auto v = find_choice<E>(text);
  if (!v) return "choose " + choice_list<E>();
  out = *v;
  return "";
}

std::string format_value(int v);
std::string format_value(uint64_t v);
// The shortest text that parses back to the same float.
std::string format_value(float v);
std::string format_value(bool v);
std::string format_value(const std::string& v);
// The values one a line, as options_to_ini prints a repeatable option.
std::string format_value(const std::vector<std::string>& v);
// The shortest of Nh, Nm, Ns that is exact ("" when off); parses back equal.
std::string format_value(const Duration& d);

template <typename E>
requires std::is_enum_v<E> std::string format_value(E v) {
  return choice_name(v);
}

}  // namespace fsdp
