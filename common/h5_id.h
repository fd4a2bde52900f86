// Owning HDF5 identifier: every id a function opens is closed on every path
// out of it, including throw paths. Shared by data/ (token files) and shard/
// (checkpoints); include it only from .cpp files, so public headers stay free
// of hdf5.h (and the mpi.h that parallel HDF5 pulls in).
#pragma once

#include <hdf5.h>

#include <utility>

namespace fsdp {

class H5Id {
 public:
  using Close = herr_t (*)(hid_t);

  H5Id() = default;
  H5Id(hid_t id, Close close) : id_(id), close_(close) {}
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  H5Id(H5Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  H5Id& operator=(H5Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  ~H5Id() { reset(); }

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  hid_t release() { return std::exchange(id_, H5I_INVALID_HID); }
  // Closes now and returns HDF5's status: a failed H5Fclose can mean
  // unwritten data, so writers check it instead of leaving it to the destructor.
  herr_t close() {
    const herr_t rc = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = H5I_INVALID_HID;
    return rc;
  }
  void reset() {
    // A failed close in a destructor has nowhere to go; the read paths that
    // matter check their own calls.
    if (id_ >= 0 && close_) close_(id_);
    id_ = H5I_INVALID_HID;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Close close_ = nullptr;
};

// A file opened read-only by one process, without HDF5's file lock: readers
// never race writers of the files opened this way, and locks fail or hang on
// NFS/Lustre (docs/ARCHITECTURE.md, "Platform facts"). Invalid when it cannot
// be opened; the caller's error names the file and the flag.
inline H5Id open_read_only(const char* path) {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (!fapl.valid() || H5Pset_file_locking(fapl.get(), false, true) < 0) return {};
  return H5Id(H5Fopen(path, H5F_ACC_RDONLY, fapl.get()), H5Fclose);
}

}  // namespace fsdp
