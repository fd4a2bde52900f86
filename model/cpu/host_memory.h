// How much host memory this process can still get, for the check that a run
// fits before it allocates (src/policy/memory_check.h). MemAvailable alone is not
// the answer inside a container or a Slurm job: the cgroup's limit is what
// the OOM killer enforces, and it is often far below the machine's memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fsdp {

// "MemAvailable:  123456 kB" in /proc/meminfo's text, in bytes; nullopt when
// the line is missing (kernels before 3.14) or unreadable.
std::optional<int64_t> meminfo_available_bytes(const std::string& meminfo);

// What a cgroup still grants: limit - usage (0 if over), from the text of
// memory.max / memory.limit_in_bytes and memory.current /
// memory.usage_in_bytes. nullopt for no limit ("max", or v1's huge
// page-rounded LONG_MAX) or unreadable text.
std::optional<int64_t> cgroup_headroom_bytes(const std::string& limit, const std::string& usage);

// MemAvailable lowered to the smallest headroom of this process's memory
// cgroup and its ancestors (v2 or v1, found through /proc/self/cgroup).
// `root` prefixes every path, so tests can point it at a fake /proc and /sys.
// Throws fsdp::Error when /proc/meminfo has no MemAvailable.
int64_t host_free_memory_bytes(const std::string& root = "");

}  // namespace fsdp
