#include "checkpoint/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <sstream>
#include <utility>

#include "common/error.h"

namespace fsdp {

namespace {

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) return "unknown";
  return host;
}

std::string now_text() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buf;
}

std::string read_all(int fd) {
  std::string text(4096, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? size_t(n) : 0);
  return text;
}

// "pid 12 host h since t" as written by acquire(); anything else is shown raw
// rather than trusted, since the file may come from an older or foreign tool.
std::string describe_holder(const std::string& text) {
  std::istringstream in(text);
  std::string line, pid, host, since;
  while (std::getline(in, line)) {
    const auto space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    if (key == "pid") pid = value;
    if (key == "host") host = value;
    if (key == "since") since = value;
  }
  // The holder writes its name just after locking, so a racing reader can
  // see an empty file.
  if (pid.empty() || host.empty())
    return "held by another process (it has not written its name yet)";
  return "held by pid " + pid + " on host " + host + (since.empty() ? "" : " since " + since);
}

bool cannot_lock_here(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS;
}

}  // namespace

std::string DirLock::lock_path(const std::string& dir) {
  return (std::filesystem::path(dir) / ".lock").string();
}

DirLock DirLock::acquire(const std::string& dir, std::string* warning, const FlockFn& flock_fn) {
  const std::string path = lock_path(dir);
  // Never O_TRUNC: the holder's name must survive until we know we hold it.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw_error("cannot create the lock file '", path, "': ", std::strerror(errno),
                "; pass a writable --checkpoint-dir");
  const int rc = flock_fn ? flock_fn(fd, LOCK_EX | LOCK_NB) : ::flock(fd, LOCK_EX | LOCK_NB);
  const int err = errno;
  if (rc != 0) {
    const std::string holder = read_all(fd);
    ::close(fd);
    if (err == EWOULDBLOCK)
      throw_error("checkpoint directory '", dir,
                  "' is in use by another run: ", describe_holder(holder), " (", path,
                  "); wait for that run to end, or pass another --checkpoint-dir");
    if (cannot_lock_here(err)) {
      *warning = "cannot lock checkpoint directory '" + dir + "' (flock: " + std::strerror(err) +
                 "; this file system has no locks): nothing stops another run from writing "
                 "into it at the same time";
      return DirLock();
    }
    throw_error("cannot lock '", path, "': ", std::strerror(err));
  }
  DirLock lock(fd);
  std::ostringstream text;
  text << "pid " << ::getpid() << "\nhost " << host_name() << "\nsince " << now_text() << "\n";
  const std::string s = text.str();
  // Flushed, so a run on another node of a shared file system can read it.
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, s.data(), s.size(), 0) != ssize_t(s.size()) ||
      ::fdatasync(fd) != 0)
    throw_error("cannot write the lock file '", path, "': ", std::strerror(errno));
  return lock;
}

DirLock::DirLock(DirLock&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

DirLock::~DirLock() {
  release();
}

void DirLock::release() {
  if (fd_ < 0) return;
  // An empty file says "nobody" to whoever looks; close drops the lock.
  (void)::ftruncate(fd_, 0);
  ::close(fd_);
  fd_ = -1;
}

}  // namespace fsdp
