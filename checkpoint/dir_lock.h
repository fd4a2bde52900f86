// An exclusive claim on a checkpoint directory for the lifetime of one run, so
// two runs never write (and prune, and rename over) each other's checkpoints.
// flock() on DIR/.lock: the kernel drops the lock when the holder exits or is
// killed, so a crashed run never leaves a stale claim behind. The file's text
// names the holder (host, pid, start time) for the refusal message.
// Single-process (the trainer's rank 0 takes it).
#pragma once

#include <functional>
#include <string>

namespace fsdp {

class DirLock {
 public:
  // The lock call, replaceable so tests can play a file system without locks.
  using FlockFn = std::function<int(int fd, int op)>;

  // Takes the lock on `dir` (which must exist). Throws fsdp::Error naming the
  // holder when another process has it. Where the file system cannot lock
  // (ENOLCK, EOPNOTSUPP, ENOSYS: some NFS and Lustre mounts) the run goes on
  // unprotected and *warning says so; otherwise *warning is left empty.
  static DirLock acquire(const std::string& dir, std::string* warning,
                         const FlockFn& flock_fn = nullptr);

  DirLock() = default;
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();

  // True while this object holds a real lock (false after the fallback).
  bool held() const { return fd_ >= 0; }
  static std::string lock_path(const std::string& dir);

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  void release();
  int fd_ = -1;
};

}  // namespace fsdp
