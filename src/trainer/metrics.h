// Run metrics: one JSON object per line in --metrics FILE (rank 0 only), and a
// short human line on stdout.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace fsdp {

class MetricsLog {
 public:
  MetricsLog() = default;
  // path empty: no file. Throws fsdp::Error if the file cannot be created.
  // Opening changes nothing in an existing file: a run that fails before its
  // first line leaves an earlier run's metrics as they were.
  explicit MetricsLog(const std::string& path) { open(path); }
  void open(const std::string& path);
  // A resumed run (and --eval-only) appends; a fresh run starts the file anew
  // at its first line. Returns whether that will drop earlier lines.
  bool begin(bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // fields: (key, already-formatted JSON value), written in order.
  void write(const std::vector<std::pair<std::string, std::string>>& fields);

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  bool truncate_ = false;  // at the next write
};

struct Options;

// The run's options as one JSON object: the metrics' "config", which a
// dashboard follower (tools/follow_metrics.py) logs as the run's
// hyperparameters. Numbers and switches are typed, a repeatable option is an
// array, and an empty text option is left out, as options_to_ini does.
std::string options_json(const Options& o);

std::string json_number(double v);  // null for NaN/inf, shortest round-trip otherwise
std::string json_string(const std::string& s);
std::string format_duration(double seconds);  // h:mm:ss
std::string format_rate(double per_second);   // 12.3K

}  // namespace fsdp
