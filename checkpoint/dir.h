// The file-system side of checkpoints: names, the `latest` pointer, durable
// renames and pruning. Plain single-process calls; the collective functions
// in checkpoint.h run them on rank 0 and share the outcome.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fsdp {

class CheckpointDir {
 public:
  explicit CheckpointDir(std::string dir);

  const std::string& dir() const { return dir_; }
  // DIR/step_00000100.h5: zero-padded so names sort like steps.
  std::string path_for_step(int64_t step) const;
  static std::string tmp_path(const std::string& path) { return path + ".tmp"; }
  // The step a checkpoint file name encodes, or nullopt for any other name
  // (including leftover .tmp files of a crashed save).
  static std::optional<int64_t> step_of(const std::string& path);

  // Creates DIR and checks that a file can be created in it; throws
  // fsdp::Error naming DIR and what to do otherwise.
  void ensure_writable() const;
  // Bytes an unprivileged writer may still use on DIR's file system.
  int64_t free_bytes() const;
  // Creates `path` empty with `bytes` of disk reserved past its end
  // (fallocate KEEP_SIZE), so writes up to that size cannot fail for space,
  // not even when another process fills the disk meanwhile. Returns 0, or
  // the errno: ENOSPC (then `path` is removed), or EOPNOTSUPP where the file
  // system cannot reserve (some NFS, Lustre), when the caller goes on
  // without. Throws for other failures.
  static int reserve(const std::string& path, int64_t bytes);
  // Gives back what reserve() set aside beyond the file's end.
  static void release_reserve(const std::string& path);
  // Deletes what crashed saves leave behind (step_*.h5.tmp, latest.tmp, and
  // .write_probe.* of a run killed while checking the directory; no other
  // names) and returns the deleted paths. Only the directory's lock
  // holder may call it: another run's .tmp may be a save in progress.
  std::vector<std::string> remove_stray_tmp() const;
  // Complete-by-name checkpoints (step_*.h5), newest step first. Validity of
  // their contents is the caller's business.
  std::vector<std::string> list() const;
  // The path `latest` names, if the pointer exists and names a file in DIR.
  std::optional<std::string> latest() const;

  // Writes what this process left of `path` in the page cache to disk
  // (fsync through a descriptor of its own, outside HDF5).
  static void sync_file(const std::string& path);
  // Durably replaces `to` by `from` (rename, then fsync DIR), so after a
  // crash either the old or the new file is there, never a partial one.
  static void publish(const std::string& from, const std::string& to);
  // Writes `latest` = basename(path) via latest.tmp, durably.
  void set_latest(const std::string& path) const;
  // Deletes all but the newest `keep` checkpoints, never `protect` nor the
  // file `latest` names. Returns the deleted paths. keep <= 0: nothing.
  std::vector<std::string> prune(int keep, const std::string& protect) const;

 private:
  std::string dir_;
};

}  // namespace fsdp
