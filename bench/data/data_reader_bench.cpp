// Token reader throughput per rank: long sequential reads of each rank's
// share, and the training access pattern (random windows through
// BatchLoader) read synchronously and with the reader thread, with and
// without simulated compute between steps. Run under mpirun for more ranks.
//
//   data_reader_bench [--dir D] [--tokens N] [--seq-len T] [--batch B]
//                     [--accum A] [--steps S] [--compute-ms C] [--keep]
//
// Writes D/bench_tokens.h5 (uint16, 1M-token chunks as tools/prepare_data.py
// makes them) and removes it at the end unless --keep. Each phase runs twice:
// "warm" (whatever the page cache holds, usually all of a freshly written
// file) and "cold", after posix_fadvise(DONTNEED) asked the kernel to drop the
// file's cached pages, which needs no root but is only a request.
#include <fcntl.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/hdf5_lock.h"
#include "data/batch_loader.h"

namespace {

struct Args {
  std::string dir = "build/bench_tmp";
  int64_t tokens = 150'000'000;  // 300 MB of uint16
  int seq_len = 1024, batch = 8, accum = 4, steps = 200, compute_ms = 20;
  bool keep = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    const auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (k == "--dir")
      a.dir = next();
    else if (k == "--tokens")
      a.tokens = std::stoll(next());
    else if (k == "--seq-len")
      a.seq_len = std::stoi(next());
    else if (k == "--batch")
      a.batch = std::stoi(next());
    else if (k == "--accum")
      a.accum = std::stoi(next());
    else if (k == "--steps")
      a.steps = std::stoi(next());
    else if (k == "--compute-ms")
      a.compute_ms = std::stoi(next());
    else if (k == "--keep")
      a.keep = true;
    else
      throw std::runtime_error("unknown argument " + k);
  }
  return a;
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void write_tokens(const std::string& path, int64_t n) {
  fsdp::Hdf5Lock lock;
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  const hsize_t dims = static_cast<hsize_t>(n), chunk = hsize_t{1} << 20;
  const hid_t space = H5Screate_simple(1, &dims, nullptr);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 1, &chunk);
  const hid_t dset =
      H5Dcreate2(file, "/tokens", H5T_STD_U16LE, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  std::vector<uint16_t> buf(chunk);
  uint64_t x = 88172645463325252ull;
  for (hsize_t start = 0; start < dims; start += chunk) {
    const hsize_t count = std::min(chunk, dims - start);
    for (hsize_t i = 0; i < count; ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      buf[i] = static_cast<uint16_t>(x % 50257);
    }
    const hid_t mem = H5Screate_simple(1, &count, nullptr);
    const hid_t fs = H5Dget_space(dset);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, nullptr, &count, nullptr);
    if (H5Dwrite(dset, H5T_NATIVE_UINT16, mem, fs, H5P_DEFAULT, buf.data()) < 0)
      throw std::runtime_error("writing " + path + " failed");
    H5Sclose(fs);
    H5Sclose(mem);
  }
  const int64_t vocab = 50257;
  const hid_t scalar = H5Screate(H5S_SCALAR);
  const hid_t attr =
      H5Acreate2(dset, "vocab_size", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, &vocab);
  H5Aclose(attr);
  H5Sclose(scalar);
  H5Dclose(dset);
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Fclose(file);
}

// Asks the kernel to forget the file's cached pages (every rank, same node).
void drop_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  fdatasync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

int rank_, world_;

// Prints one line per rank, in rank order, from rank 0.
void report(const std::string& what, double tokens, double seconds, const std::string& extra) {
  double mine[2] = {tokens / seconds, seconds};
  std::vector<double> all(2 * world_);
  MPI_Gather(mine, 2, MPI_DOUBLE, all.data(), 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::vector<char> text(256, 0), texts(256 * world_);
  std::snprintf(text.data(), text.size(), "%s", extra.c_str());
  MPI_Gather(text.data(), 256, MPI_CHAR, texts.data(), 256, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank_ != 0) return;
  for (int r = 0; r < world_; ++r)
    std::printf("%-44s rank %d: %8.2f Mtok/s (%6.1f MB/s on disk)  %.2f s %s\n", what.c_str(), r,
                all[2 * r] / 1e6, all[2 * r] * 2 / 1e6, all[2 * r + 1], &texts[256 * r]);
  std::fflush(stdout);
}

void sequential(const fsdp::TokenStream& s, const std::string& label) {
  const int64_t lo = s.size() * rank_ / world_, hi = s.size() * (rank_ + 1) / world_;
  const int64_t block = int64_t{16} << 20;  // 16M tokens, 32 MiB of uint16
  std::vector<int32_t> buf(block);
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  int64_t sum = 0;
  for (int64_t o = lo; o < hi; o += block) {
    const int64_t n = std::min(block, hi - o);
    s.read(o, n, buf.data());
    sum += buf[0];
  }
  const double dt = now() - t0;
  report("sequential 32 MiB blocks, " + label, double(hi - lo), dt,
         sum < 0 ? "!" : "");  // `sum` keeps the reads alive
}

void training(const fsdp::TokenStream& s, const Args& a, int prefetch, int compute_ms,
              const std::string& label) {
  fsdp::BatchLoader loader(s, a.seq_len, a.batch, a.accum, rank_, world_, 1234,
                           fsdp::LoaderOptions{.prefetch_steps = prefetch});
  std::vector<int32_t> in(size_t(a.batch) * a.seq_len), tg(in.size());
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = now();
  for (int step = 0; step < a.steps; ++step) {
    for (int m = 0; m < a.accum; ++m) loader.next_micro_batch(m, in.data(), tg.data());
    loader.end_step();
    if (compute_ms) std::this_thread::sleep_for(std::chrono::milliseconds(compute_ms));
  }
  const double dt = now() - t0;
  char extra[128];
  std::snprintf(extra, sizeof extra, "wait %.3f s total, %.2f ms/step", loader.wait_seconds(),
                1e3 * loader.wait_seconds() / a.steps);
  const double tokens = double(a.steps) * a.accum * a.batch * (a.seq_len + 1);
  report("windows " + std::string(prefetch ? "prefetch 2" : "sync      ") +
             (compute_ms ? ", +" + std::to_string(compute_ms) + " ms compute" : ", no compute") +
             ", " + label,
         tokens, dt, extra);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);
  int rc = 0;
  try {
    const Args a = parse(argc, argv);
    const std::string path = a.dir + "/bench_tokens.h5";
    if (rank_ == 0) {
      std::filesystem::create_directories(a.dir);
      const double t0 = now();
      write_tokens(path, a.tokens);
      std::printf(
          "wrote %s: %lld uint16 tokens (%.0f MB) in %.1f s; %d rank(s); seq_len %d, "
          "batch %d, accum %d, %d steps\n",
          path.c_str(), (long long)a.tokens, a.tokens * 2 / 1e6, now() - t0, world_, a.seq_len,
          a.batch, a.accum, a.steps);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    {
      for (const char* label : {"warm", "cold"}) {
        const bool cold = std::strcmp(label, "cold") == 0;
        if (cold) drop_cache(path);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = now();
        const auto s = fsdp::TokenStream::open(path, "--train-data", MPI_COMM_WORLD);
        report(std::string("open + split token scan, ") + label, double(s.scanned_tokens()),
               now() - t0, "");
        if (cold) drop_cache(path);
        sequential(s, label);
        for (int prefetch : {0, 2}) {
          if (cold) drop_cache(path);
          training(s, a, prefetch, 0, label);
        }
        for (int prefetch : {0, 2}) {
          if (cold) drop_cache(path);
          training(s, a, prefetch, a.compute_ms, label);
        }
      }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0 && !a.keep) std::filesystem::remove(path);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_reader_bench: rank %d: %s\n", rank_, e.what());
    rc = 1;
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
