// The one list of fsdptrain's options. Each row names an option once and
// carries everything about it: help, how its text becomes a value, its rule and
// how it prints. --help, flag and INI parsing, validation and options_to_ini
// all walk this table, so adding an option is adding one row.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "src/options/options.h"

namespace fsdp {

enum class OptionKind { integer, real, boolean, text, choice };

struct OptionRow {
  std::string name;        // the flag without "--", and the INI key
  std::string value_name;  // for --help: INT, FLOAT, FILE, auto|cpu|cuda, ...
  std::string help;
  OptionKind kind = OptionKind::text;
  bool model_field = false;  // overrides the --model preset; applied after it
  bool run_control = false;  // steers one run only: left out of the checkpoint's copy
  bool is_switch = false;    // given alone on the command line, it means true
  bool repeatable = false;   // given several times, each value counts (--prompt)
  // The value as text; parses back to the same value.
  std::function<std::string(const Options&)> get;
  // Converts the text into the field: "" or the rule the text breaks.
  std::function<std::string(Options&, std::string_view)> set;
  // The option's rule, checked once every option is set (it may read the
  // others, e.g. --min-lr <= --lr): "" or the rule the value breaks.
  std::function<std::string(const Options&)> check;
  // --help's "(default ...)" when the default is a rule, not Options{}'s
  // value (--min-lr: a tenth of --lr); empty: get(Options{}).
  std::string default_help;
  // A valid value that differs from the default, printed as get() prints it:
  // the round-trip test sets every row to it, so a new row is tested at once.
  std::string example;
};

// --model comes first: the preset loads before the fields that override it.
const std::vector<OptionRow>& option_table();
const OptionRow* find_option(std::string_view name);

}  // namespace fsdp
