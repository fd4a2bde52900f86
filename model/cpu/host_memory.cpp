#include "model/cpu/host_memory.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/error.h"

namespace fsdp {

namespace {

// Limits at or above this are "no limit": cgroup v1 reports LONG_MAX rounded
// down to a page (9223372036854771712), some container runtimes similar.
constexpr int64_t kNoLimit = int64_t{1} << 60;

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int64_t> parse_bytes(const std::string& text) {
  try {
    size_t used = 0;
    const long long v = std::stoll(text, &used);
    if (v < 0 || text.find_first_not_of(" \t\n", used) != std::string::npos) return std::nullopt;
    return static_cast<int64_t>(v);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The headroom of `dir` and every ancestor up to `top`: a parent's limit
// binds its children too (a Slurm job's limit sits above its steps').
std::optional<int64_t> tree_headroom(const std::string& top, std::string rel,
                                     const char* limit_file, const char* usage_file) {
  std::optional<int64_t> least;
  while (true) {
    const std::string dir = top + rel;
    const auto limit = read_text(dir + "/" + limit_file);
    const auto usage = read_text(dir + "/" + usage_file);
    if (limit && usage)
      if (const auto h = cgroup_headroom_bytes(*limit, *usage))
        least = std::min(least.value_or(*h), *h);
    if (rel.empty() || rel == "/") return least;
    const size_t slash = rel.find_last_of('/');
    rel = slash == std::string::npos ? "" : rel.substr(0, slash);
  }
}

}  // namespace

std::optional<int64_t> meminfo_available_bytes(const std::string& meminfo) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("MemAvailable:", 0) != 0) continue;
    std::istringstream fields(line.substr(13));
    long long kib = -1;
    std::string unit;
    if (!(fields >> kib >> unit) || kib < 0 || unit != "kB") return std::nullopt;
    return static_cast<int64_t>(kib) * 1024;
  }
  return std::nullopt;
}

std::optional<int64_t> cgroup_headroom_bytes(const std::string& limit, const std::string& usage) {
  if (limit.rfind("max", 0) == 0) return std::nullopt;
  const auto l = parse_bytes(limit), u = parse_bytes(usage);
  if (!l || !u || *l >= kNoLimit) return std::nullopt;
  return std::max<int64_t>(0, *l - *u);
}

int64_t host_free_memory_bytes(const std::string& root) {
  const auto meminfo = read_text(root + "/proc/meminfo");
  const auto available = meminfo ? meminfo_available_bytes(*meminfo) : std::nullopt;
  if (!available)
    throw_error("cannot read MemAvailable from ", root,
                "/proc/meminfo, so the memory plan cannot "
                "be checked against free host memory");
  int64_t free_bytes = *available;
  // /proc/self/cgroup: "0::/path" (v2), "N:memory:/path" or "N:...,memory,...:/path" (v1).
  std::istringstream lines(read_text(root + "/proc/self/cgroup").value_or(""));
  std::string line;
  while (std::getline(lines, line)) {
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    // Appended, not "," + substr + ",": GCC 12 warns (-Wrestrict) on that form falsely.
    std::string controllers = ",";
    controllers.append(line, a + 1, b - a - 1).push_back(',');
    std::string rel = line.substr(b + 1);
    if (rel == "/") rel.clear();
    std::optional<int64_t> h;
    if (controllers == ",,") {
      h = tree_headroom(root + "/sys/fs/cgroup", rel, "memory.max", "memory.current");
    } else if (controllers.find(",memory,") != std::string::npos) {
      h = tree_headroom(root + "/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes",
                        "memory.usage_in_bytes");
    }
    if (h) free_bytes = std::min(free_bytes, *h);
  }
  return free_bytes;
}

}  // namespace fsdp
