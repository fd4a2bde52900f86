// HDF5 plumbing of the checkpoint code, internal to shard/: owning ids, call
// checking with HDF5's own reason in the message, file-access properties and
// attributes. Callers hold fsdp::Hdf5Lock around every sequence of calls.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

namespace fsdp::ckpt {

class H5 {
 public:
  using Close = herr_t (*)(hid_t);
  H5() = default;
  H5(hid_t id, Close close) : id_(id), close_(close) {}
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  H5(H5&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  H5& operator=(H5&& o) noexcept {
    std::swap(id_, o.id_);
    std::swap(close_, o.close_);
    return *this;
  }
  // Error paths only; the success path closes through close() to check it.
  ~H5() {
    if (id_ >= 0 && close_) close_(id_);
  }
  hid_t get() const { return id_; }
  // Checked close: a failed H5Fclose can mean unwritten data.
  void close(const std::string& what);

 private:
  hid_t id_ = H5I_INVALID_HID;
  Close close_ = nullptr;
};

// HDF5's innermost reason for the last failure ("truncated file: eof = ...").
std::string h5_reason();
// Throws fsdp::Error "checkpoint 'path': what failed: reason" when rc < 0.
void h5_check(herr_t rc, const char* what, const std::string& path);
H5 h5_own(hid_t id, H5::Close close, const char* what, const std::string& path);

// Turns HDF5's stderr error stack off for this process: our one-line errors
// carry the reason instead.
void h5_quiet();

// File access for all ranks of `comm` together (MPI-IO, collective metadata,
// 1 MiB alignment, no file locking), or for one process (comm MPI_COMM_NULL).
H5 make_fapl(MPI_Comm comm, const std::string& path);
// Collective transfer for dataset reads and writes.
H5 make_dxpl(const std::string& path);

// Attributes on an object. Every rank of a parallel file writes the same value.
void put_i64(hid_t obj, const char* name, int64_t v, const std::string& path);
void put_f32(hid_t obj, const char* name, float v, const std::string& path);
void put_str(hid_t obj, const char* name, const std::string& v, const std::string& path);
int64_t get_i64(hid_t obj, const char* name, const std::string& path);
float get_f32(hid_t obj, const char* name, const std::string& path);
std::string get_str(hid_t obj, const char* name, const std::string& path);

// Reads a dataset's dimensions, or returns false if it is not an f32 dataset.
bool f32_dims(hid_t dset, std::vector<hsize_t>* dims);

}  // namespace fsdp::ckpt
