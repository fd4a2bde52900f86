// Moving each rank's slices of the flat, padded unit shards to and from the
// logical-shape datasets. A rank's shard covers a contiguous range of each
// parameter's row-major elements; in an N-D dataset that range is a union of
// at most 2N-1 hyperslab blocks (partial first row, whole rows, partial last
// row, recursively), which HDF5 visits in row-major order, i.e. in the order
// the elements sit in the shard.
#include <algorithm>

#include "checkpoint/checksum.h"
#include "checkpoint/file_format.h"
#include "checkpoint/h5.h"
#include "common/error.h"
#include "common/hdf5_lock.h"
#include "model/params.h"

namespace fsdp::ckpt {

namespace {

struct Block {
  std::vector<hsize_t> start, count;
};

// Row-major elements [a, b), a < b, of an array of shape dims[d..] as blocks.
std::vector<Block> flat_blocks(const std::vector<hsize_t>& dims, size_t d, hsize_t a, hsize_t b) {
  if (d + 1 == dims.size()) return {Block{{a}, {b - a}}};
  hsize_t inner = 1;
  for (size_t i = d + 1; i < dims.size(); ++i) inner *= dims[i];
  std::vector<Block> out;
  auto in_row = [&](hsize_t row, hsize_t lo, hsize_t hi) {
    for (Block& s : flat_blocks(dims, d + 1, lo, hi)) {
      s.start.insert(s.start.begin(), row);
      s.count.insert(s.count.begin(), 1);
      out.push_back(std::move(s));
    }
  };
  hsize_t r0 = a / inner;
  const hsize_t r1 = b / inner, ra = a % inner, rb = b % inner;
  if (r0 == r1) {
    in_row(r0, ra, rb);
    return out;
  }
  if (ra != 0) in_row(r0++, ra, inner);
  if (r1 > r0) {
    Block whole{std::vector<hsize_t>(dims.size() - d, 0), {r1 - r0}};
    whole.start[0] = r0;
    whole.count.insert(whole.count.end(), dims.begin() + long(d) + 1, dims.end());
    out.push_back(std::move(whole));
  }
  if (rb != 0) in_row(r1, 0, rb);
  return out;
}

struct Transfer {
  bool write;
  hid_t dxpl;
  int64_t max_elems;
  const std::string& path;
  CheckpointIoStats* stats;
};

// Moves this rank's part of parameter `param` (all of it, or nothing when
// !active) between `host_shard` and `dset`, in the same number of
// collective calls on every rank: a write reads `host_shard`, a read fills it.
void transfer(const Transfer& t, hid_t dset, const std::vector<hsize_t>& dims, const UnitLayout& l,
              int param, int rank, bool active, float* host_shard, uint64_t* checksum) {
  const int ranks = int(l.padded / l.shard);
  int64_t most = 0;
  for (int r = 0; r < ranks; ++r) most = std::max(most, shard_overlap(l, param, r).count);
  const int64_t calls = std::max<int64_t>(1, (most + t.max_elems - 1) / t.max_elems);
  const Overlap o = active ? shard_overlap(l, param, rank) : Overlap{};
  const int64_t local = o.count ? o.local : 0;
  const int64_t in_param = o.count ? o.begin - l.offsets[param] : 0;

  for (int64_t i = 0; i < calls; ++i) {
    const int64_t lo = std::min(o.count, i * t.max_elems);
    const int64_t hi = std::min(o.count, (i + 1) * t.max_elems);
    H5 fspace = h5_own(H5Dget_space(dset), H5Sclose, "H5Dget_space", t.path);
    const hsize_t n = hsize_t(hi - lo);
    H5 mspace =
        h5_own(H5Screate_simple(1, std::vector<hsize_t>{std::max<hsize_t>(n, 1)}.data(), nullptr),
               H5Sclose, "H5Screate_simple", t.path);
    if (n == 0) {
      h5_check(H5Sselect_none(fspace.get()), "H5Sselect_none", t.path);
      h5_check(H5Sselect_none(mspace.get()), "H5Sselect_none", t.path);
    } else {
      bool first = true;
      for (const Block& b : flat_blocks(dims, 0, hsize_t(in_param + lo), hsize_t(in_param + hi))) {
        h5_check(H5Sselect_hyperslab(fspace.get(), first ? H5S_SELECT_SET : H5S_SELECT_OR,
                                     b.start.data(), nullptr, b.count.data(), nullptr),
                 "H5Sselect_hyperslab", t.path);
        first = false;
      }
    }
    // Memory type = file type: any conversion would make HDF5 drop to
    // independent I/O without saying so.
    float* buf = host_shard + (n ? local + lo : 0);
    if (t.write)
      h5_check(H5Dwrite(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), t.dxpl, buf),
               "H5Dwrite", t.path);
    else
      h5_check(H5Dread(dset, H5T_NATIVE_FLOAT, mspace.get(), fspace.get(), t.dxpl, buf), "H5Dread",
               t.path);
    *checksum += checksum_of(uint64_t(in_param + lo), buf, size_t(n));
    H5D_mpio_actual_io_mode_t mode = H5D_MPIO_NO_COLLECTIVE;
    h5_check(H5Pget_mpio_actual_io_mode(t.dxpl, &mode), "H5Pget_mpio_actual_io_mode", t.path);
    if (t.stats) {
      t.stats->bytes += int64_t(n) * 4;
      t.stats->data_calls += 1;
      t.stats->not_collective_calls += mode == H5D_MPIO_NO_COLLECTIVE ? 1 : 0;
    }
  }
}

H5 make_dcpl(const std::string& path) {
  H5 dcpl = h5_own(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate", path);
  h5_check(H5Pset_layout(dcpl.get(), H5D_CONTIGUOUS), "H5Pset_layout", path);
  // Every element is written once by its owner; a fill pass would double the I/O.
  h5_check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time", path);
  h5_check(H5Pset_alloc_time(dcpl.get(), H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time", path);
  return dcpl;
}

int64_t max_elems(const CheckpointIoOptions& io) {
  const int64_t n = io.max_call_bytes / int64_t(sizeof(float));
  FSDP_CHECK(n > 0 && io.max_call_bytes < (int64_t{1} << 31), "max_call_bytes ", io.max_call_bytes);
  return n;
}

// Dataset `name` of shape `dims`: created (write) or opened (read).
H5 dataset(hid_t file, bool write, const std::string& name, const std::vector<hsize_t>& dims,
           const std::string& path) {
  if (!write) return h5_own(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose, "H5Dopen2", path);
  H5 dcpl = make_dcpl(path);
  H5 space = h5_own(H5Screate_simple(int(dims.size()), dims.data(), nullptr), H5Sclose,
                    "H5Screate_simple", path);
  return h5_own(H5Dcreate2(file, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(),
                           H5P_DEFAULT),
                H5Dclose, "creating a dataset", path);
}

// Moves one unit's shard of one group (`host`, l.shard floats) to or from
// its parameters' datasets; `active`: this rank moves its slices (false: a
// replica taking part in a write with empty selections). A write takes the
// HDF5 lock per dataset; a read runs under its caller's.
void move_unit(bool write, bool active, hid_t file, const UnitSpec& unit, const UnitLayout& l,
               int shard_rank, const char* group, float* host, const CheckpointIoOptions& io,
               const std::string& path, CheckpointIoStats* stats, Checksums* sums) {
  for (size_t p = 0; p < unit.params.size(); ++p) {
    const ParamSpec& spec = unit.params[p];
    const std::vector<hsize_t> dims(spec.shape.begin(), spec.shape.end());
    const std::string name = std::string(group) + "/" + spec.name;
    sums->names.push_back(name);
    sums->sums.push_back(0);
    Hdf5Lock lock;
    H5 dxpl = make_dxpl(path);
    H5 dset = dataset(file, write, name, dims, path);
    const Transfer t{write, dxpl.get(), max_elems(io), path, stats};
    transfer(t, dset.get(), dims, l, int(p), shard_rank, active, host, &sums->sums.back());
    h5_close(dset, path);
  }
}

}  // namespace

void write_tensors(hid_t file, const ModelConfig& model, ShardSource& shards,
                   const CheckpointIoOptions& io, bool writer, const std::string& path,
                   CheckpointIoStats* stats, Checksums* sums) {
  *sums = {};
  const std::vector<UnitSpec> units = model_units(model);
  FSDP_CHECK(int(units.size()) == shards.num_units(), "model and shards disagree on units");
  for (int u = 0; u < shards.num_units(); ++u)
    for (size_t g = 0; g < std::size(kGroups); ++g) {
      // Only read: H5Dwrite takes the buffer as const.
      float* host = const_cast<float*>(shards.shard(u, int(g)));
      move_unit(true, writer, file, units[size_t(u)], shards.layout(u), shards.shard_rank(),
                kGroups[g], host, io, path, stats, sums);
    }
}

void read_tensors(hid_t file, const CheckpointContext& c, const std::string& path,
                  CheckpointIoStats* stats, Checksums* sums) {
  *sums = {};
  FsdpEngine& engine = c.engine;
  const std::vector<UnitSpec> units = model_units(c.model);
  FSDP_CHECK(int(units.size()) == engine.num_units(), "model and engine disagree on units");
  std::vector<float> host;
  for (int u = 0; u < engine.num_units(); ++u) {
    const UnitLayout& l = engine.layout(u);
    for (size_t g = 0; g < std::size(kGroups); ++g) {
      // A forward-only engine (--eval-only) has no optimizer state: its
      // groups are read all the same, so that every checksum is verified,
      // and dropped.
      const bool keep = g == 0 || engine.trains();
      const Tensor shard = keep ? engine_shard(engine, u, int(g)) : Tensor{};
      FSDP_CHECK(!keep || (shard.dtype == DType::f32 && shard.numel == l.shard));
      // Padding elements past the last parameter must read as zero.
      host.assign(size_t(l.shard), 0.0f);
      move_unit(false, true, file, units[size_t(u)], l, engine.shard_rank(), kGroups[g],
                host.data(), c.io, path, stats, sums);
      if (keep) c.ops.to_device(shard, host.data());
    }
  }
}

}  // namespace fsdp::ckpt
