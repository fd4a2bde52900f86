#include "checkpoint/collective.h"

#include "comm/mpi_check.h"
#include "common/error.h"

namespace fsdp::ckpt {

int rank_of(MPI_Comm c) {
  int r = 0;
  check_mpi(MPI_Comm_rank(c, &r), "MPI_Comm_rank");
  return r;
}

int size_of(MPI_Comm c) {
  int n = 0;
  check_mpi(MPI_Comm_size(c, &n), "MPI_Comm_size");
  return n;
}

void bcast(std::string& s, int root, MPI_Comm c) {
  int64_t n = int64_t(s.size());
  check_mpi(MPI_Bcast(&n, 1, MPI_INT64_T, root, c), "MPI_Bcast");
  s.resize(size_t(n));
  if (n > 0) check_mpi(MPI_Bcast(s.data(), int(n), MPI_CHAR, root, c), "MPI_Bcast");
}

void agree(MPI_Comm world, std::string error) {
  const int size = size_of(world);
  int first = error.empty() ? size : rank_of(world);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, world), "MPI_Allreduce");
  if (first == size) return;
  bcast(error, first, world);
  // Every rank holds the same message: main() may print it once and let all
  // ranks exit normally instead of aborting the job.
  throw AgreedError(error);
}

int shard_group_size(const FsdpEngine& engine) {
  const UnitLayout& l = engine.layout(0);
  return int(l.padded / l.shard);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace fsdp::ckpt
