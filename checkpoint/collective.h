// How the checkpoint code keeps ranks together, internal to checkpoint/.
// Decisions that depend on the file system (is the directory writable, is
// this file damaged, which checkpoint is newest) are made once, on rank 0,
// and shared, so every rank takes the same branch and throws the same error.
#pragma once

#include <mpi.h>

#include <chrono>
#include <exception>
#include <string>

#include "shard/engine.h"

namespace fsdp::ckpt {

int rank_of(MPI_Comm c);
int size_of(MPI_Comm c);
void bcast(std::string& s, int root, MPI_Comm c);

// Every rank throws the lowest failing rank's error (as AgreedError, so
// main() prints it once), or none does. Also a barrier.
void agree(MPI_Comm world, std::string error);

// Runs f on rank 0 only and shares its error with every rank.
template <typename F>
void on_root(MPI_Comm world, F&& f) {
  std::string error;
  if (rank_of(world) == 0) try {
      f();
    } catch (const std::exception& e) {
      // Any failure on rank 0 (std::filesystem too) must reach every rank,
      // or they would wait for it in the next collective.
      error = e.what();
    }
  agree(world, error);
}

// Ranks per shard group: how many ways each unit is split.
int shard_group_size(const FsdpEngine& engine);

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace fsdp::ckpt
