// Debian's parallel HDF5 is built without thread safety, so every HDF5 call
// in the process goes through this one lock: the data prefetch thread reads
// tokens while the training thread may be writing a checkpoint.
#pragma once

#include <mutex>

namespace fsdp {

inline std::recursive_mutex& hdf5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Usage: { Hdf5Lock lock; H5Dread(...); }
class Hdf5Lock {
 public:
  Hdf5Lock() : lock_(hdf5_mutex()) {}

 private:
  std::lock_guard<std::recursive_mutex> lock_;
};

}  // namespace fsdp
