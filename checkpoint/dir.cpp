#include "checkpoint/dir.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"

namespace fsdp {

namespace fs = std::filesystem;

namespace {

constexpr const char* kPrefix = "step_";
constexpr const char* kSuffix = ".h5";
constexpr const char* kLatest = "latest";
constexpr const char* kWriteProbe = ".write_probe.";

void fsync_path(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0) throw_error("cannot open '", path, "' to sync it: ", std::strerror(errno));
  // A directory's fsync is what makes a rename inside it survive a power cut.
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw_error("fsync of '", path, "' failed: ", std::strerror(err));
}

std::string parent_of(const std::string& path) {
  const fs::path p = fs::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

}  // namespace

CheckpointDir::CheckpointDir(std::string dir)
    : dir_(dir.empty() ? fs::path(".").string() : std::move(dir)) {}

std::string CheckpointDir::path_for_step(int64_t step) const {
  char name[64];
  std::snprintf(name, sizeof name, "%s%08lld%s", kPrefix, static_cast<long long>(step), kSuffix);
  return (fs::path(dir_) / name).string();
}

std::optional<int64_t> CheckpointDir::step_of(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  const std::string pre = kPrefix, suf = kSuffix;
  if (name.size() <= pre.size() + suf.size() || name.rfind(pre, 0) != 0 ||
      name.compare(name.size() - suf.size(), suf.size(), suf) != 0)
    return std::nullopt;
  const std::string digits = name.substr(pre.size(), name.size() - pre.size() - suf.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      digits.size() > 18)
    return std::nullopt;
  return std::stoll(digits);
}

void CheckpointDir::ensure_writable() const {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec)
    throw_error("checkpoint directory '", dir_, "' cannot be created: ", ec.message(),
                "; pass a writable --checkpoint-dir");
  if (!fs::is_directory(dir_, ec))
    throw_error("checkpoint directory '", dir_,
                "' is not a directory; pass a writable --checkpoint-dir");
  // access(W_OK) says yes to root on a read-only mount, so really create a file.
  const std::string probe = (fs::path(dir_) / (kWriteProbe + std::to_string(::getpid()))).string();
  const int fd = ::open(probe.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_error("checkpoint directory '", dir_, "' is not writable: ", std::strerror(errno),
                "; pass a writable --checkpoint-dir");
  ::close(fd);
  ::unlink(probe.c_str());
}

int64_t CheckpointDir::free_bytes() const {
  struct statvfs st {};
  if (::statvfs(dir_.c_str(), &st) != 0)
    throw_error("cannot query free space of '", dir_, "': ", std::strerror(errno));
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

int CheckpointDir::reserve(const std::string& path, int64_t bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_error("cannot create '", path, "': ", std::strerror(errno));
  // KEEP_SIZE: the file stays empty, so HDF5's create-and-truncate keeps the
  // blocks (it truncates only a non-empty file).
  const int rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, bytes);
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  if (err == 0 || err == EOPNOTSUPP || err == ENOSYS) return err == ENOSYS ? EOPNOTSUPP : err;
  ::unlink(path.c_str());
  if (err == ENOSPC || err == EDQUOT) return ENOSPC;
  throw_error("cannot reserve ", bytes, " bytes for '", path, "': ", std::strerror(err));
}

void CheckpointDir::release_reserve(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  // Truncating to its own size frees the blocks reserved past the end.
  if (!ec) fs::resize_file(path, size, ec);
  if (ec) throw_error("cannot trim '", path, "': ", ec.message());
}

std::vector<std::string> CheckpointDir::remove_stray_tmp() const {
  std::vector<std::string> removed;
  std::error_code ec;
  const std::string latest_tmp = tmp_path(kLatest);
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string suffix = tmp_path("");
    // A writability probe outlives its run only when the run was killed
    // between creating and deleting it (ensure_writable).
    const bool probe = name.starts_with(kWriteProbe);
    if (!probe && (name.size() <= suffix.size() || !name.ends_with(suffix))) continue;
    const std::string base = name.substr(0, name.size() - suffix.size());
    if (!(probe || step_of(base) || name == latest_tmp) || !it->is_regular_file(ec)) continue;
    const std::string p = it->path().string();
    if (!fs::remove(p, ec) || ec)
      throw_error("cannot delete '", p, "', left by a crashed save: ", ec.message());
    removed.push_back(p);
  }
  if (ec) throw_error("cannot list checkpoint directory '", dir_, "': ", ec.message());
  std::sort(removed.begin(), removed.end());
  return removed;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string p = it->path().string();
    if (auto step = step_of(p); step && it->is_regular_file(ec)) found.emplace_back(*step, p);
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [s, p] : found) out.push_back(p);
  return out;
}

std::optional<std::string> CheckpointDir::latest() const {
  std::ifstream in(fs::path(dir_) / kLatest);
  std::string name;
  if (!in || !std::getline(in, name)) return std::nullopt;
  // A pointer naming anything but a checkpoint of this directory is ignored,
  // not followed: the scan by name finds the same files anyway.
  if (!step_of(name) || fs::path(name).has_parent_path()) return std::nullopt;
  const std::string p = (fs::path(dir_) / name).string();
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  return p;
}

void CheckpointDir::publish(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw_error("cannot rename '", from, "' to '", to, "': ", std::strerror(errno));
  fsync_path(parent_of(to), O_RDONLY | O_DIRECTORY);
}

void CheckpointDir::sync_file(const std::string& path) {
  fsync_path(path, O_RDONLY);
}

void CheckpointDir::set_latest(const std::string& path) const {
  const std::string target = (fs::path(dir_) / kLatest).string();
  const std::string tmp = tmp_path(target);
  try {
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << fs::path(path).filename().string() << "\n";
      out.close();
      if (!out) throw_error("cannot write '", tmp, "': ", std::strerror(errno));
    }
    fsync_path(tmp, O_RDONLY);
    publish(tmp, target);
  } catch (...) {
    // A full disk fails here too; `latest` still names the previous file.
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

std::vector<std::string> CheckpointDir::prune(int keep, const std::string& protect) const {
  std::vector<std::string> removed;
  if (keep <= 0) return removed;
  const std::optional<std::string> pointed = latest();
  std::error_code ec;
  auto same = [&](const std::string& a, const std::string& b) {
    return !b.empty() && fs::equivalent(a, b, ec);
  };
  const std::vector<std::string> all = list();
  for (size_t i = size_t(keep); i < all.size(); ++i) {
    if (same(all[i], protect) || (pointed && same(all[i], *pointed))) continue;
    if (!fs::remove(all[i], ec) || ec)
      throw_error("cannot delete old checkpoint '", all[i], "': ", ec.message());
    removed.push_back(all[i]);
  }
  return removed;
}

}  // namespace fsdp
