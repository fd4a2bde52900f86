// Checkpoint write and read bandwidth at the launched rank count, beside the
// disk's own sequential write rate measured in the same run.
//
//   mpirun -np N checkpoint_bench [--model gpt-350m] [--n-layer L] [--dir DIR] [--repeat 3]
//
// Builds the real engine state (FsdpEngine over CpuOps, masters and AdamW
// moments of the model, sharded over all ranks) and times save_checkpoint
// and load_checkpoint, median of --repeat. The disk rate is one process
// writing a file of the checkpoint's size with large write() calls, then
// fsync, which is what a save ends with too (H5Fflush -> MPI_File_sync).
// Files go to DIR and are deleted afterwards.
#include <fcntl.h>
#include <mpi.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.h"
#include "comm/mpi_io_choice.h"
#include "comm/process_groups.h"
#include "model/cpu/cpu_ops.h"
#include "model/params.h"

namespace {

using namespace fsdp;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One process, sequential 64 MiB writes, fsync: the rate a save can hope for.
double disk_write_seconds(const std::string& path, int64_t bytes) {
  std::vector<char> block(size_t(64) << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = char(i * 131 + 7);
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_error("cannot create '", path, "': ", std::strerror(errno));
  for (int64_t left = bytes; left > 0;) {
    const ssize_t n =
        ::write(fd, block.data(), size_t(std::min<int64_t>(left, int64_t(block.size()))));
    if (n <= 0) throw_error("write to '", path, "' failed: ", std::strerror(errno));
    left -= n;
  }
  if (::fsync(fd) != 0) throw_error("fsync of '", path, "' failed: ", std::strerror(errno));
  ::close(fd);
  const double s = since(t0);
  ::unlink(path.c_str());
  return s;
}

int run(int argc, char** argv) {
  std::string model_name = "gpt-350m", dir = "build/bench_tmp";
  int n_layer = 0, repeat = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model")
      model_name = v;
    else if (a == "--n-layer")
      n_layer = std::stoi(v);
    else if (a == "--dir")
      dir = v;
    else if (a == "--repeat")
      repeat = std::stoi(v);
    else
      throw_error("unknown flag ", a);
  }
  ModelConfig cfg = model_preset(model_name);
  if (n_layer > 0) cfg.n_layer = n_layer;
  cfg.max_seq_len = 16;  // the model is never run; keep activations tiny

  ProcessGroups g = make_process_groups(Backend::mpi, 0);
  const int rank = g.world->rank(), world = g.world->size();
  CpuOps ops;
  Transformer model(cfg, ops, 1, 16);
  const auto t_init = Clock::now();
  FsdpEngine engine(model, ops, *g.shard, nullptr, EngineOptions{});
  const double init_s = since(t_init);
  const int64_t bytes = 3 * 4 * num_params(cfg);  // masters + two moments, f32

  std::vector<double> disk, save, load;
  CheckpointIoStats ws, rs;
  for (int i = 0; i < repeat; ++i) {
    g.world->barrier()->wait();
    if (rank == 0) {
      std::filesystem::create_directories(dir);
      disk.push_back(disk_write_seconds(dir + "/disk_probe.bin", bytes));
    }
    g.world->barrier()->wait();
    CheckpointMeta meta;
    meta.step = i;
    SaveOptions opt;
    opt.keep = 1;
    const CheckpointContext c{cfg, engine, ops, MPI_COMM_WORLD};
    const std::string path = save_checkpoint(c, dir, meta, opt, &ws);
    save.push_back(ws.seconds);
    load_checkpoint(c, path, &rs);
    load.push_back(rs.seconds);
  }
  g.world->barrier()->wait();
  if (rank == 0) {
    for (const auto& e : std::filesystem::directory_iterator(dir))
      if (e.path().filename().string().rfind("step_", 0) == 0 || e.path().filename() == "latest")
        std::filesystem::remove(e.path());
    const double gb = double(bytes) / 1e9, d = median(disk), s = median(save), l = median(load);
    std::printf(
        "model %s, n_layer %d: %.1fM parameters, checkpoint %.2f GB "
        "(masters + 2 moments, f32); engine state per rank %.2f GB; init %.1f s\n",
        cfg.name.c_str(), cfg.n_layer, num_params(cfg) / 1e6, gb,
        double(engine.persistent_bytes()) / 1e9, init_s);
    std::printf("ranks %d, %d collective data calls per rank, %d not collective\n", world,
                ws.data_calls, ws.not_collective_calls);
    std::printf("disk sequential write (1 process, 64 MiB writes + fsync): %.2f s  %.0f MB/s\n", d,
                1e3 * gb / d);
    std::printf("save (median of %d): %.2f s  %.0f MB/s  = %.0f%% of disk\n", repeat, s,
                1e3 * gb / s, 100.0 * d / s);
    std::printf("load (median of %d): %.2f s  %.0f MB/s  (page cache warm)\n", repeat, l,
                1e3 * gb / l);
    std::printf("all runs (s): disk");
    for (double x : disk) std::printf(" %.2f", x);
    std::printf("  save");
    for (double x : save) std::printf(" %.2f", x);
    std::printf("  load");
    for (double x : load) std::printf(" %.2f", x);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  prefer_romio_for_mpi_io();  // the MPI-IO layer fsdptrain saves through
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: error: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
