#include "checkpoint/h5.h"

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>

#include "common/error.h"

namespace fsdp::ckpt {

namespace {

herr_t first_reason(unsigned n, const H5E_error2_t* e, void* out) {
  // Walking upward, entry 0 is where HDF5 detected the problem; the others
  // only say which API call it surfaced through.
  if (n == 0 && e->desc) *static_cast<std::string*>(out) = e->desc;
  return 0;
}

herr_t every_reason(unsigned, const H5E_error2_t* e, void* out) {
  auto& text = *static_cast<std::string*>(out);
  if (e->desc && *e->desc) text += (text.empty() ? "" : "; ") + std::string(e->desc);
  return 0;
}

std::string where(const std::string& path) {
  return "checkpoint '" + path + "': ";
}

}  // namespace

void h5_close(H5& h, const std::string& path) {
  h5_check(h.close(), "closing", path);
}

std::string h5_reason() {
  std::string reason;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, first_reason, &reason);
  return reason.empty() ? "unknown HDF5 error" : reason;
}

std::string h5_stack_text() {
  std::string text;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, every_reason, &text);
  return text;
}

thread_local std::string failure_stack;

const std::string& h5_failure_stack() {
  return failure_stack;
}

void h5_clear_failure_stack() {
  failure_stack.clear();
}

void h5_check(herr_t rc, const char* what, const std::string& path) {
  if (rc >= 0) return;
  failure_stack = h5_stack_text();
  throw_error(where(path), what, " failed: ", h5_reason());
}

H5 h5_own(hid_t id, H5::Close close, const char* what, const std::string& path) {
  if (id < 0) {
    failure_stack = h5_stack_text();
    throw_error(where(path), what, " failed: ", h5_reason());
  }
  return H5(id, close);
}

void h5_quiet() {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
}

H5 make_fapl(MPI_Comm comm, const std::string& path) {
  H5 fapl = h5_own(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate", path);
  // Lustre and NFS locks fail or hang; the rename protocol, not a lock, is
  // what keeps readers off an unfinished file.
  h5_check(H5Pset_file_locking(fapl.get(), false, true), "H5Pset_file_locking", path);
  if (comm == MPI_COMM_NULL) return fapl;
  h5_check(H5Pset_fapl_mpio(fapl.get(), comm, MPI_INFO_NULL), "H5Pset_fapl_mpio", path);
  h5_check(H5Pset_all_coll_metadata_ops(fapl.get(), true), "H5Pset_all_coll_metadata_ops", path);
  h5_check(H5Pset_coll_metadata_write(fapl.get(), true), "H5Pset_coll_metadata_write", path);
  // No H5Pset_alignment: starting each tensor on a 1 MiB boundary left the
  // gaps between them as holes, so files were 2-5x their data by size and a
  // copy to another file system filled the holes in. Collective writes are
  // already split into stripe-aligned file domains by the MPI-IO layer.
  return fapl;
}

H5 make_dxpl(const std::string& path) {
  H5 dxpl = h5_own(H5Pcreate(H5P_DATASET_XFER), H5Pclose, "H5Pcreate", path);
  h5_check(H5Pset_dxpl_mpio(dxpl.get(), H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio", path);
  return dxpl;
}

namespace {

void put(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* v,
         const std::string& path) {
  H5 space = h5_own(H5Screate(H5S_SCALAR), H5Sclose, "H5Screate", path);
  H5 attr = h5_own(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, "creating an attribute", path);
  h5_check(H5Awrite(attr.get(), mem_type, v), "H5Awrite", path);
  h5_close(attr, path);
}

// "attribute 'step'" on the root, "attribute 'n_layer' of /model" on a group.
std::string attr_label(hid_t obj, const char* name) {
  char group[256] = {0};
  const ssize_t n = H5Iget_name(obj, group, sizeof group);
  const std::string g = n > 0 ? std::string(group) : "/";
  return "attribute '" + std::string(name) + "'" + (g == "/" ? "" : " of " + g);
}

std::string damaged(const std::string& path) {
  return "checkpoint '" + path + "' is damaged: ";
}

H5 open_attr(hid_t obj, const char* name, const std::string& path) {
  const htri_t exists = H5Aexists(obj, name);
  if (exists <= 0) throw_error(damaged(path), attr_label(obj, name), " is missing");
  return h5_own(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose, "H5Aopen", path);
}

// What an attribute holds, for messages: "a string", "an array of 64 floats".
std::string describe(H5T_class_t cls, hssize_t points, bool scalar) {
  const char* kind = cls == H5T_INTEGER  ? "integer"
                     : cls == H5T_FLOAT  ? "float"
                     : cls == H5T_STRING ? "string"
                                         : "non-numeric value";
  if (scalar || points == 1) return std::string(cls == H5T_INTEGER ? "an " : "a ") + kind;
  return "an array of " + std::to_string(points) + " " + kind + "s";
}

// Opens `name`, which must hold exactly one value of class `want`: anything
// else (an array, a string where a number belongs) is refused by name before
// H5Aread could write past one scalar.
H5 open_one(hid_t obj, const char* name, H5T_class_t want, const std::string& path) {
  H5 attr = open_attr(obj, name, path);
  H5 space = h5_own(H5Aget_space(attr.get()), H5Sclose, "H5Aget_space", path);
  H5 type = h5_own(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type", path);
  const H5S_class_t shape = H5Sget_simple_extent_type(space.get());
  const hssize_t points = H5Sget_simple_extent_npoints(space.get());
  const H5T_class_t cls = H5Tget_class(type.get());
  const bool scalar = shape == H5S_SCALAR;
  if (cls != want || !(scalar || (shape == H5S_SIMPLE && points == 1)))
    throw_error(damaged(path), attr_label(obj, name), " is ", describe(cls, points, scalar),
                ", not one ", want == H5T_INTEGER ? "integer" : "float");
  return attr;
}

void put_array(hid_t obj, const char* name, hid_t file_type, hid_t mem_type, const void* data,
               size_t count, const std::string& path) {
  const hsize_t n = count;
  H5 space = h5_own(H5Screate_simple(1, &n, nullptr), H5Sclose, "H5Screate_simple", path);
  H5 attr = h5_own(H5Acreate2(obj, name, file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                   H5Aclose, "creating an attribute", path);
  h5_check(H5Awrite(attr.get(), mem_type, data), "H5Awrite", path);
  h5_close(attr, path);
}

// Exactly the class, size and sign written: a narrower or converted copy
// would have lost bits.
template <typename T>
std::vector<T> get_array(hid_t obj, const char* name, H5T_class_t cls, H5T_sign_t sign,
                         hid_t mem_type, const char* what, const std::string& path) {
  H5 attr = open_attr(obj, name, path);
  H5 space = h5_own(H5Aget_space(attr.get()), H5Sclose, "H5Aget_space", path);
  H5 type = h5_own(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type", path);
  if (H5Tget_class(type.get()) != cls || H5Tget_size(type.get()) != sizeof(T) ||
      (cls == H5T_INTEGER && H5Tget_sign(type.get()) != sign) ||
      H5Sget_simple_extent_type(space.get()) != H5S_SIMPLE ||
      H5Sget_simple_extent_ndims(space.get()) != 1)
    throw_error(damaged(path), attr_label(obj, name), " is not a 1-D array of ", what);
  std::vector<T> v(size_t(H5Sget_simple_extent_npoints(space.get())));
  h5_check(H5Aread(attr.get(), mem_type, v.data()), "H5Aread", path);
  return v;
}

}  // namespace

std::string attr_name(hid_t obj, const char* name) {
  return attr_label(obj, name);
}

void put_i64(hid_t obj, const char* name, int64_t v, const std::string& path) {
  put(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, path);
}

void put_f32(hid_t obj, const char* name, float v, const std::string& path) {
  put(obj, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, &v, path);
}

void put_str(hid_t obj, const char* name, const std::string& v, const std::string& path) {
  // Attributes live in the object header, which holds at most 64 KiB.
  if (v.size() > 60000)
    throw_error(where(path), "attribute '", name, "' is ", v.size(),
                " bytes; at most 60000 fit an HDF5 attribute");
  H5 type = h5_own(H5Tcopy(H5T_C_S1), H5Tclose, "H5Tcopy", path);
  h5_check(H5Tset_size(type.get(), v.empty() ? 1 : v.size()), "H5Tset_size", path);
  h5_check(H5Tset_strpad(type.get(), H5T_STR_NULLPAD), "H5Tset_strpad", path);
  h5_check(H5Tset_cset(type.get(), H5T_CSET_UTF8), "H5Tset_cset", path);
  const std::string padded = v.empty() ? std::string(1, '\0') : v;
  put(obj, name, type.get(), type.get(), padded.data(), path);
}

void put_u64s(hid_t obj, const char* name, const std::vector<uint64_t>& v,
              const std::string& path) {
  put_array(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, v.data(), v.size(), path);
}

std::vector<uint64_t> get_u64s(hid_t obj, const char* name, const std::string& path) {
  return get_array<uint64_t>(obj, name, H5T_INTEGER, H5T_SGN_NONE, H5T_NATIVE_UINT64, "uint64",
                             path);
}

void put_i64s(hid_t obj, const char* name, const std::vector<int64_t>& v, const std::string& path) {
  put_array(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v.data(), v.size(), path);
}

std::vector<int64_t> get_i64s(hid_t obj, const char* name, const std::string& path) {
  return get_array<int64_t>(obj, name, H5T_INTEGER, H5T_SGN_2, H5T_NATIVE_INT64, "int64", path);
}

void put_f64s(hid_t obj, const char* name, const std::vector<double>& v, const std::string& path) {
  put_array(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), v.size(), path);
}

std::vector<double> get_f64s(hid_t obj, const char* name, const std::string& path) {
  return get_array<double>(obj, name, H5T_FLOAT, H5T_SGN_ERROR, H5T_NATIVE_DOUBLE, "float64", path);
}

int64_t get_i64(hid_t obj, const char* name, const std::string& path) {
  H5 attr = open_one(obj, name, H5T_INTEGER, path);
  H5 type = h5_own(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type", path);
  if (H5Tget_sign(type.get()) == H5T_SGN_NONE) {
    // HDF5 would clip an unsigned value above INT64_MAX to INT64_MAX.
    uint64_t u = 0;
    h5_check(H5Aread(attr.get(), H5T_NATIVE_UINT64, &u), "H5Aread", path);
    if (u > uint64_t(INT64_MAX))
      throw_error(damaged(path), attr_label(obj, name), " is ", u, ", beyond the range of int64");
    return int64_t(u);
  }
  int64_t v = 0;
  h5_check(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), "H5Aread", path);
  return v;
}

int64_t get_i64_in(hid_t obj, const char* name, int64_t lo, int64_t hi, const std::string& path) {
  const int64_t v = get_i64(obj, name, path);
  if (v < lo || v > hi)
    throw_error(damaged(path), attr_label(obj, name), " is ", v, "; it must be ",
                lo == hi          ? std::to_string(lo)
                : hi == INT64_MAX ? std::to_string(lo) + " or more"
                                  : "between " + std::to_string(lo) + " and " + std::to_string(hi));
  return v;
}

float get_f32(hid_t obj, const char* name, const std::string& path) {
  H5 attr = open_one(obj, name, H5T_FLOAT, path);
  // Read wide so a float64 beyond float's range is seen as such, not as inf.
  double v = 0;
  h5_check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &v), "H5Aread", path);
  if (!std::isfinite(v) || std::fabs(v) > double(FLT_MAX))
    throw_error(damaged(path), attr_label(obj, name), " is ", v, ", not a finite float");
  return float(v);
}

std::string get_str(hid_t obj, const char* name, const std::string& path) {
  H5 attr = open_attr(obj, name, path);
  H5 type = h5_own(H5Aget_type(attr.get()), H5Tclose, "H5Aget_type", path);
  if (H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
    throw_error(damaged(path), attr_label(obj, name), " is not a fixed-length string");
  H5 space = h5_own(H5Aget_space(attr.get()), H5Sclose, "H5Aget_space", path);
  if (H5Sget_simple_extent_npoints(space.get()) != 1)
    throw_error(damaged(path), attr_label(obj, name), " is not one string");
  std::string v(H5Tget_size(type.get()), '\0');
  h5_check(H5Aread(attr.get(), type.get(), v.data()), "H5Aread", path);
  v.resize(v.find('\0') == std::string::npos ? v.size() : v.find('\0'));
  return v;
}

bool f32_dims(hid_t dset, std::vector<hsize_t>* dims) {
  H5 type(H5Dget_type(dset), H5Tclose);
  if (type.get() < 0 || H5Tget_class(type.get()) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
    return false;
  H5 space(H5Dget_space(dset), H5Sclose);
  const int rank = space.get() < 0 ? -1 : H5Sget_simple_extent_ndims(space.get());
  if (rank < 0) return false;
  dims->assign(size_t(rank), 0);
  return H5Sget_simple_extent_dims(space.get(), dims->data(), nullptr) >= 0;
}

}  // namespace fsdp::ckpt
