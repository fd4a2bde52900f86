#include "src/options/options.h"

#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string_view>

#include "common/error.h"
#include "model/params.h"
#include "src/options/option_table.h"

namespace po = boost::program_options;

namespace fsdp {

namespace {

// --config and --help are no rows of the table: both --help and
// options_reference() print them from here.
constexpr const char* kConfigHelp =
    "INI file of option = value lines, named as the flags; flags override it";
constexpr const char* kHelpHelp = "print the options and exit";

std::string help_line(const OptionRow& r) {
  if (r.model_field || r.is_switch) return r.help;
  const std::string d = r.default_help.empty() ? r.get(Options{}) : r.default_help;
  return d.empty() ? r.help : r.help + " (default " + d + ")";
}

// Boost parses the syntax only (flags, INI lines, unknown or repeated names);
// every value stays text until its row converts and checks it.
void add_rows(po::options_description& d) {
  for (const auto& r : option_table()) {
    if (r.repeatable) {
      auto* v = po::value<std::vector<std::string>>()->composing();
      d.add_options()(r.name.c_str(), v->value_name(r.value_name), help_line(r).c_str());
      continue;
    }
    auto* v = po::value<std::string>();
    if (r.is_switch)
      v->zero_tokens()->implicit_value("true");
    else
      v->value_name(r.value_name);
    d.add_options()(r.name.c_str(), v, help_line(r).c_str());
  }
}

po::options_description flags_description() {
  po::options_description d{"fsdptrain options", 100};
  d.add_options()("help,h", kHelpHelp)("config", po::value<std::string>()->value_name("FILE"),
                                       kConfigHelp);
  add_rows(d);
  return d;
}

// Everything an INI file may set: the options, not --config or --help.
po::options_description ini_description() {
  po::options_description d;
  add_rows(d);
  return d;
}

std::string read_config(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw_error("--config: '", path, "' is a directory; pass an INI file of option = value lines");
  std::ifstream in(path);
  if (!in) throw_error("--config: cannot read '", path, "': no such file or not readable");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw_error("--config: reading '", path, "' failed; check the file");
  return text.str();
}

void add_given(std::map<std::string, GivenValue>& given, const po::variables_map& vm,
               const std::string& where) {
  for (const auto& r : option_table()) {
    if (!vm.count(r.name)) continue;
    if (!r.repeatable) {
      given[r.name] = {vm[r.name].as<std::string>(), where};
      continue;
    }
    const auto& texts = vm[r.name].as<std::vector<std::string>>();
    given[r.name] = {texts.back(), where, texts};
  }
}

// Names the options that `given` may have meant: those it starts (--step for
// --steps, which Boost's prefix guessing once took silently on the command
// line but not in a file) and those one edit away. "" when none is close.
std::string did_you_mean(std::string given, const std::string& dashes) {
  while (!given.empty() && given.front() == '-') given.erase(0, 1);
  if (const size_t eq = given.find('='); eq != std::string::npos) given.resize(eq);
  auto one_edit = [](const std::string& a, const std::string& b) {
    if (a.size() > b.size()) return false;
    size_t i = 0;
    while (i < a.size() && a[i] == b[i]) ++i;
    if (a.size() == b.size()) return a.compare(i + 1, std::string::npos, b, i + 1) == 0;
    return a.size() + 1 == b.size() && a.compare(i, std::string::npos, b, i + 1) == 0;
  };
  std::string names;
  for (const auto& r : option_table()) {
    const bool close = given.size() >= 3 && (r.name.rfind(given, 0) == 0 ||
                                             one_edit(given, r.name) || one_edit(r.name, given));
    if (close) names += (names.empty() ? "" : " or ") + (dashes + r.name);
  }
  return names.empty() ? "" : "; did you mean " + names + "?";
}

// A word where a flag should be. After a value of --train-data/--val-data it
// is almost always the shell's expansion of an unquoted glob.
[[noreturn]] void unexpected_word(int argc, const char* const argv[], const std::string& word) {
  std::string after;
  for (int i = 2; i < argc; ++i)
    if (argv[i] == word) {
      // Walk back over the other words to the flag they follow.
      int j = i - 1;
      while (j > 0 && std::string_view(argv[j]).rfind("--", 0) != 0) --j;
      if (j > 0) after = std::string(argv[j]).substr(0, std::string_view(argv[j]).find('='));
      break;
    }
  if (after == "--train-data" || after == "--val-data")
    throw_error("unexpected argument '", word, "' after ", after,
                " FILE: if the shell expanded a pattern, quote it (", after,
                " 'shards/*.h5'), or join the files with commas (", after, " a.h5,b.h5)");
  throw_error("unexpected argument '", word,
              "': every option is a --flag VALUE pair (see fsdptrain --help)");
}

[[noreturn]] void invalid(const OptionRow& r, const GivenValue& g, const std::string& rule) {
  throw_error(g.where, "--", r.name, ": '", g.text, "' is invalid: ", rule);
}

// Rules that tie options together; single values were checked by their rows.
void check_combinations(const Options& o) {
  const CheckpointOptions& c = o.checkpoint;
  if (c.dir.empty() && (c.every > 0 || c.resume == "auto" || o.run.stop_at_step > 0 || c.keep > 0))
    throw_error(
        "--checkpoint-every/--resume auto/--stop-at-step/--keep-checkpoints need "
        "--checkpoint-dir DIR");
  if (o.divergence.action == OnDivergence::rollback && c.dir.empty())
    throw_error(
        "--on-divergence rollback needs --checkpoint-dir DIR: it goes back to the newest "
        "checkpoint there");
  if (!o.sample.prompts.empty() && o.sample.count == 0)
    throw_error("--prompt needs --samples N (N > 0): the samples are what start from it");
  if (o.eval.only && o.data.val_data.empty())
    throw_error("--eval-only needs --val-data: the HDF5 token file to evaluate on");
  if (o.eval.seq_len > 0 && o.data.val_data.empty())
    throw_error("--eval-seq-len ", o.eval.seq_len,
                " needs --val-data: the HDF5 token file to validate on");
  if (o.data.batch_size > 0) check_eval_micro_batch(o, o.data.batch_size);
  if (o.data.train_data.empty() && !o.eval.only)
    throw_error("--train-data is required: pass an HDF5 token file (see tools/prepare_data.py)");
}

// Every value a run needs, and the rules that tie options together.
Options build(const std::map<std::string, GivenValue>& given) {
  Options o = options_from_values(given);
  check_combinations(o);
  return o;
}

}  // namespace

void check_eval_micro_batch(const Options& o, int batch) {
  const int T = o.data.seq_len, L = o.eval.context(T);
  if (o.eval.micro_batch(batch, T) >= 1) return;
  throw_error("--eval-seq-len ", L, " needs a training micro-batch of at least ", L,
              " tokens to validate in, but --batch-size ", batch, " x --seq-len ", T, " holds ",
              int64_t(batch) * T, "; raise --batch-size to ", (L + T - 1) / T);
}

// In table order: the preset first, then the model fields over it, then
// ModelConfig's own consistency, then each row's rule (which may read other
// options).
Options options_from_values(const std::map<std::string, GivenValue>& given) {
  Options o;
  for (const auto& r : option_table()) {
    auto it = given.find(r.name);
    if (it == given.end()) continue;
    const GivenValue& g = it->second;
    for (const std::string& text : r.repeatable ? g.texts : std::vector<std::string>{g.text}) {
      const std::string rule = r.set(o, text);
      if (!rule.empty()) invalid(r, {text, g.where}, rule);
    }
  }
  validate_model(o.model);
  // A time budget fixes the step count itself; --steps, given, caps it.
  if (o.run.time_budget.seconds > 0 && !given.count("steps")) o.run.steps = 0;
  // --min-lr, not given, is a tenth of --lr, so a fine-tuning rate below the
  // old fixed 1e-4 needs no --min-lr of its own. Divided in double from
  // --lr's decimal text, so the default --lr 0.001 gives exactly 1e-4 as before.
  if (!given.count("min-lr"))
    o.schedule.min_lr = float(std::stod(find_option("lr")->get(o)) / 10.0);
  // --prompt asks for samples: one of each, unless --samples says how many.
  if (!o.sample.prompts.empty() && !given.count("samples")) o.sample.count = 1;
  for (const auto& r : option_table()) {
    if (!r.check) continue;
    const std::string rule = r.check(o);
    if (rule.empty()) continue;
    auto it = given.find(r.name);
    invalid(r, it != given.end() ? it->second : GivenValue{r.get(o), ""}, rule);
  }
  if (o.data.seq_len == 0) o.data.seq_len = o.model.max_seq_len;
  return o;
}

std::string options_help() {
  std::ostringstream os;
  os << "usage: fsdptrain --train-data FILE.h5 [options]\n"
     << "       mpirun -np N fsdptrain ...   (one rank per GPU, or --device cpu)\n\n"
     << flags_description();
  return os.str();
}

std::string options_reference() {
  // A table cell holds no newline and no unescaped '|' (choice lists use it).
  const auto cell = [](std::string s) {
    std::string out;
    for (char c : s)
      out += c == '|' ? std::string("\\|") : c == '\n' ? std::string(" ") : std::string(1, c);
    return out;
  };
  std::ostringstream os;
  os << "# fsdptrain's options\n\n"
     << "Every option, from the program's own option table (`src/options/option_table.cpp`), in "
        "its\n"
     << "order; generated by `build/tools/fsdp_options_doc > docs/OPTIONS.md` and held to the\n"
     << "table by CTest `options_reference`. Each is a flag (`--name VALUE`) and an INI key\n"
     << "(`name = VALUE` in a `--config` file; flags override the file). *model*: overrides\n"
     << "the `--model` preset's field. *this run*: steers one run only, so a checkpoint's copy\n"
     << "of the configuration leaves it out. *repeatable*: each value counts.\n\n"
     << "| option | value | default | what it does |\n"
     << "| --- | --- | --- | --- |\n"
     << "| `--config` | FILE | | " << kConfigHelp << " |\n"
     << "| `--help`, `-h` | | | " << kHelpHelp << " |\n";
  for (const auto& r : option_table()) {
    // a value as code; a rule (--min-lr's "a tenth of --lr") as words
    const std::string value = r.get(Options{});
    const std::string d = r.model_field             ? "the preset's"
                          : !r.default_help.empty() ? r.default_help
                          : value.empty()           ? ""
                                                    : "`" + value + "`";
    std::string tags;
    for (const auto& [on, tag] :
         {std::pair{r.model_field, "model"}, std::pair{r.run_control, "this run"},
          std::pair{r.repeatable, "repeatable"}})
      if (on) tags += std::string(tags.empty() ? " (*" : ", *") + tag + "*";
    if (!tags.empty()) tags += ")";
    os << "| `--" << r.name << "` | " << cell(r.is_switch ? "(alone: true)" : r.value_name) << " | "
       << cell(d) << " | " << cell(r.help) << tags << " |\n";
  }
  return os.str();
}

std::string options_to_ini(const Options& o, IniScope scope) {
  std::string ini;
  for (const auto& r : option_table()) {
    if (r.run_control && scope == IniScope::configuration) continue;
    const std::string v = r.get(o);
    // An empty text option is one not given, which is what a missing line reads as.
    if (r.kind == OptionKind::text && v.empty()) continue;
    if (!r.repeatable) {
      ini += r.name + " = " + v + "\n";
      continue;
    }
    // One line a value (an INI line holds no newline, so neither does a value there).
    std::istringstream values(v);
    for (std::string line; std::getline(values, line);) ini += r.name + " = " + line + "\n";
  }
  return ini;
}

std::map<std::string, std::string> ini_to_values(const std::string& ini) {
  std::map<std::string, std::string> out;
  std::istringstream in(ini);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

std::optional<Options> parse_options(int argc, const char* const argv[]) {
  std::map<std::string, GivenValue> given;
  try {
    const auto flags = flags_description();
    // No prefix guessing: a flag means what it spells, as a key in --config does.
    const int style =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    const po::parsed_options parsed =
        po::command_line_parser(argc, argv).options(flags).style(style).run();
    for (const auto& opt : parsed.options)
      if (opt.string_key.empty())
        unexpected_word(argc, argv, opt.value.empty() ? "" : opt.value[0]);
    po::variables_map cli;
    po::store(parsed, cli);
    if (cli.count("help")) {
      std::cout << options_help();
      return std::nullopt;
    }
    if (cli.count("config")) {
      const auto path = cli["config"].as<std::string>();
      std::istringstream text(read_config(path));
      const std::string where = "--config '" + path + "': ";
      po::variables_map ini;
      try {
        po::store(po::parse_config_file(text, ini_description()), ini);
      } catch (const po::unknown_option& e) {
        throw_error(where, e.what(), did_you_mean(e.get_option_name(), ""),
                    " (keys are the flags' names without --; see fsdptrain --help)");
      } catch (const po::error& e) {
        throw_error(where, e.what(),
                    " (keys are the flags' names without --; see fsdptrain --help)");
      }
      add_given(given, ini, where);
    }
    add_given(given, cli, "");  // after the file's: flags win
  } catch (const po::unknown_option& e) {
    throw_error(e.what(), did_you_mean(e.get_option_name(), "--"), " (see fsdptrain --help)");
  } catch (const po::error& e) {
    throw_error(e.what(), " (see fsdptrain --help)");
  }
  return build(given);
}

}  // namespace fsdp
