#include "model/op_profiler.h"

#include <algorithm>
#include <cstdio>
#include <set>

namespace fsdp {

OpProfiler::OpProfiler(Ops& ops) : ops_(ops) {
  ops_.set_hook(this);
}

OpProfiler::~OpProfiler() {
  ops_.set_hook(nullptr);
}

void OpProfiler::begin(const OpCall&) {
  open_ = enabled_ ? ops_.mark() : -1;
}

void OpProfiler::end(const OpCall& call) {
  if (open_ < 0) return;
  const int b = ops_.mark();
  Row& r = rows_[call.key];
  r.key = call.key;
  ++r.calls;
  r.flops += call.flops;
  r.bytes += call.bytes;
  pending_.push_back({&r, open_, b});
  open_ = -1;
}

void OpProfiler::settle() {
  for (const Pending& p : pending_) p.row->seconds += ops_.seconds(p.a, p.b);
  pending_.clear();
}

std::vector<OpProfiler::Row> OpProfiler::rows() {
  settle();
  std::vector<Row> out;
  for (const auto& [k, r] : rows_) out.push_back(r);
  std::sort(out.begin(), out.end(),
            [](const Row& a, const Row& b) { return a.seconds > b.seconds; });
  return out;
}

std::string OpProfiler::report(double min_share) {
  const std::vector<Row> all = rows();
  double total = 0;
  for (const Row& r : all) total += r.seconds;
  const double per = 1.0 / double(std::max(1L, steps_));
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line,
                "op profile (%s, %ld steps): %.3f ms per step inside ops; "
                "rate = nominal FLOPs or bytes touched / time\n"
                "  %9s %6s %7s %13s  %s\n",
                ops_.name(), steps_, total * per * 1e3, "ms/step", "share", "calls", "rate",
                "op and shape");
  out += line;
  Row rest{"(rows under " + std::to_string(min_share * 100).substr(0, 4) + "% each)"};
  auto print = [&](const Row& r) {
    char rate[32] = "";
    if (r.flops > 0 && r.seconds > 0)
      std::snprintf(rate, sizeof rate, "%7.2f TFLOP/s", r.flops / r.seconds * 1e-12);
    else if (r.bytes > 0 && r.seconds > 0)
      std::snprintf(rate, sizeof rate, "%7.1f GB/s", r.bytes / r.seconds * 1e-9);
    std::snprintf(line, sizeof line, "  %9.3f %5.1f%% %7.1f %15s  %s\n", r.seconds * per * 1e3,
                  total > 0 ? 100 * r.seconds / total : 0.0, double(r.calls) * per, rate,
                  r.key.c_str());
    out += line;
  };
  // Every op keeps its largest row, so what ran is visible however the time
  // fell (a stalled core can make any op look small).
  std::set<std::string> shown;
  for (const Row& r : all) {
    const bool first_of_op = shown.insert(r.key.substr(0, r.key.find(' '))).second;
    if (!first_of_op && total > 0 && r.seconds < min_share * total) {
      rest.calls += r.calls;
      rest.seconds += r.seconds;
      continue;
    }
    print(r);
  }
  if (rest.calls > 0) print(rest);
  return out;
}

}  // namespace fsdp
