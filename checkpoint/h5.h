// HDF5 plumbing of the checkpoint code, internal to checkpoint/: owning ids, call
// checking with HDF5's own reason in the message, file-access properties and
// attributes. Callers hold fsdp::Hdf5Lock around every sequence of calls.
#pragma once

#include <hdf5.h>
#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

#include "common/h5_id.h"

namespace fsdp::ckpt {

// Owning ids are the project's common H5Id; close them with h5_close, which
// checks the status.
using H5 = H5Id;

// HDF5's innermost reason for the last failure ("truncated file: eof = ...").
std::string h5_reason();
// Every message on HDF5's error stack, innermost first, joined by "; ": where
// the MPI-IO layer's own reason ("No space left on device") shows up.
std::string h5_stack_text();
// h5_stack_text() as it was when h5_check or h5_own last threw on this
// thread (closing ids while unwinding clears HDF5's stack).
const std::string& h5_failure_stack();
void h5_clear_failure_stack();
// Throws fsdp::Error "checkpoint 'path': what failed: reason" when rc < 0.
void h5_check(herr_t rc, const char* what, const std::string& path);
// Checked close: throws naming `path` when HDF5 reports a failure.
void h5_close(H5& h, const std::string& path);
inline void h5_close(H5&& h, const std::string& path) {
  h5_close(h, path);
}
H5 h5_own(hid_t id, H5::Close close, const char* what, const std::string& path);

// Turns HDF5's stderr error stack off for this process: our one-line errors
// carry the reason instead.
void h5_quiet();

// File access for all ranks of `comm` together (MPI-IO, collective metadata,
// no file locking), or for one process (comm MPI_COMM_NULL).
H5 make_fapl(MPI_Comm comm, const std::string& path);
// Collective transfer for dataset reads and writes.
H5 make_dxpl(const std::string& path);

// Attributes on an object. Every rank of a parallel file writes the same value.
void put_i64(hid_t obj, const char* name, int64_t v, const std::string& path);
void put_f32(hid_t obj, const char* name, float v, const std::string& path);
void put_str(hid_t obj, const char* name, const std::string& v, const std::string& path);
// Numeric attributes hold exactly one value of their class (integer, float);
// anything else, or a missing one, throws "checkpoint 'path' is damaged: ...".
int64_t get_i64(hid_t obj, const char* name, const std::string& path);
// get_i64, refused unless lo <= value <= hi.
int64_t get_i64_in(hid_t obj, const char* name, int64_t lo, int64_t hi, const std::string& path);
// Finite and within float's range.
float get_f32(hid_t obj, const char* name, const std::string& path);
// 1-D arrays of exactly the type written (the tensor checksums, a loss
// history, position ranges); missing or of another type throws as above.
void put_u64s(hid_t obj, const char* name, const std::vector<uint64_t>& v, const std::string& path);
std::vector<uint64_t> get_u64s(hid_t obj, const char* name, const std::string& path);
void put_i64s(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& path);
std::vector<int64_t> get_i64s(hid_t obj, const char* name, const std::string& path);
void put_f64s(hid_t obj, const char* name, const std::vector<double>& v, const std::string& path);
std::vector<double> get_f64s(hid_t obj, const char* name, const std::string& path);
// "attribute 'n_layer' of /model", for messages.
std::string attr_name(hid_t obj, const char* name);
std::string get_str(hid_t obj, const char* name, const std::string& path);

// Reads a dataset's dimensions, or returns false if it is not an f32 dataset.
bool f32_dims(hid_t dset, std::vector<hsize_t>* dims);

}  // namespace fsdp::ckpt
