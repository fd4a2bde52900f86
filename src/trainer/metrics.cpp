#include "src/trainer/metrics.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <regex>
#include <sstream>

#include "common/error.h"
#include "src/options/option_table.h"
#include "src/options/options.h"

namespace fsdp {

void MetricsLog::open(const std::string& path) {
  if (path.empty()) return;
  // A batch script names the file inside a checkpoint folder that the first
  // submission has not created yet.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    throw_error("--metrics: cannot create the folder '", parent.string(), "' for '", path,
                "': ", ec.message());
  f_ = std::fopen(path.c_str(), "a");
  path_ = path;
  if (!f_) throw_error("--metrics: cannot open '", path, "' for writing: ", std::strerror(errno));
}

bool MetricsLog::begin(bool append) {
  if (!f_ || append) return false;
  std::fseek(f_, 0, SEEK_END);
  truncate_ = std::ftell(f_) > 0;
  return truncate_;
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const std::vector<std::pair<std::string, std::string>>& fields) {
  if (!f_) return;
  std::string line = "{";
  for (size_t i = 0; i < fields.size(); ++i)
    line += (i ? ", " : "") + json_string(fields[i].first) + ": " + fields[i].second;
  line += "}\n";
  // Mode "a" writes at the end, wherever that now is. Only rank 0 writes, so
  // a failure here is a warning, never an exit the other ranks would wait on.
  if (truncate_ && ftruncate(fileno(f_), 0) != 0)
    std::fprintf(stderr,
                 "fsdptrain: warning: --metrics '%s': cannot start it anew (%s); appending\n",
                 path_.c_str(), std::strerror(errno));
  truncate_ = false;
  std::fputs(line.c_str(), f_);
  std::fflush(f_);  // a crashed run still leaves every finished line
}

std::string options_json(const Options& o) {
  // A number exactly as the option prints it (a 64-bit seed keeps every
  // digit) where that text is a JSON number; anything else (inf) stays text.
  static const std::regex number(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  const auto value = [](OptionKind kind, const std::string& v) {
    if (kind == OptionKind::boolean) return std::string(v == "true" ? "true" : "false");
    const bool numeric = kind == OptionKind::integer || kind == OptionKind::real;
    return numeric && std::regex_match(v, number) ? v : json_string(v);
  };
  std::string out = "{";
  for (const auto& r : option_table()) {
    const std::string v = r.get(o);
    if (r.kind == OptionKind::text && v.empty()) continue;
    std::string item;
    if (r.repeatable) {  // one value a line, as options_to_ini prints them
      std::istringstream values(v);
      for (std::string line; std::getline(values, line);)
        item += (item.empty() ? "" : ", ") + value(r.kind, line);
      item = "[" + item + "]";
    } else {
      item = value(r.kind, v);
    }
    out += (out.size() > 1 ? ", " : "") + json_string(r.name) + ": " + item;
  }
  return out + "}";
}

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string format_rate(double v) {
  char buf[32];
  if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

}  // namespace fsdp
