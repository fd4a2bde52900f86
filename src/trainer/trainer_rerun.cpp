// The rerun check: before a diverged step is acted on, it is computed once
// more from the same state (weights, data position; the update was never
// applied). Every rank compares what it computed itself, before any
// reduction mixed it with its peers' results: its loss sum and each unit's
// local gradient sum of squares (GradientNorms::local).
//
//   * Every rank repeated its result: the fault lies in the data or the
//     numerics, and rolling back or stopping (src/trainer/trainer_rollback.cpp) is
//     the answer.
//   * Some rank did not: its device (or node) computed something else from
//     the same inputs, a transient hardware fault. Nothing of the step is
//     applied or saved; the run ends with kExitTransientFault, naming the
//     rank and node, so a batch script can requeue without that node.
//
// On the CPU, and on a GPU under --debug, a rerun is bitwise; elsewhere on a
// GPU cuDNN's attention backward sums in a varying order, so a value counts
// as repeated within kRerunTolerance (a fault that moves a loss by the 2x of a
// spike, or makes it Inf, is far outside it).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>

#include "comm/watchdog.h"
#include "src/trainer/trainer.h"

namespace fsdp {

namespace {

// Relative. A fault that diverged a step moves a value by 2x or to Inf, far
// outside; a GPU rerun's reordered sums should stay far inside, which
// CudaModel.Gpt350mShapedRerunStaysInsideTheRerunTolerance checks (1e-3) on
// a GPU (tests/model/cuda/test_cuda_model.cpp).
constexpr double kRerunTolerance = 1e-2;

// Every rank's node name, in rank order (collective over MPI_COMM_WORLD).
std::vector<std::string> all_node_names(int size) {
  constexpr int kLen = 256;
  std::string mine = node_name();
  mine.resize(kLen - 1);  // padded with NULs, cut to fit
  std::vector<char> all(size_t(size) * kLen);
  MPI_Allgather(mine.c_str(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, MPI_COMM_WORLD);
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) names.emplace_back(all.data() + size_t(r) * kLen);
  return names;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

}  // namespace

void Trainer::rerun_diverged_step(DivergedStep& d, const SamplerState& before,
                                  const StepLoss& first) {
  engine_->discard_gradients();
  loader_->restore(before);
  const StepLoss again = train_step(d.step);
  const GradientNorms norms = engine_->measure_gradients();
  d.rerun_loss = again.mean;
  d.rerun_norm = norms.total;

  const double tol = ops_->capabilities().bitwise_reruns ? 0.0 : kRerunTolerance;
  bool changed = !same_rerun_value(first.local_sum, again.local_sum, tol) ||
                 d.norms.local.size() != norms.local.size();
  for (size_t i = 0; !changed && i < norms.local.size(); ++i)
    changed = !same_rerun_value(d.norms.local[i], norms.local[i], tol);
  // Which ranks changed, known to all: one flag per rank, summed.
  std::vector<float> flags(size_t(world_.size), 0.0f);
  flags[size_t(world_.rank)] = changed ? 1.0f : 0.0f;
  groups_.world->all_reduce(flags.data(), flags.size(), DType::f32, ReduceOp::sum)->wait();
  std::vector<int> ranks;
  for (int r = 0; r < world_.size; ++r)
    if (flags[size_t(r)] > 0) ranks.push_back(r);
  // Every rank repeated its own part, yet the reduced result moved: the
  // fault was in the exchange between ranks. All ranks hold the same global
  // values, so all decide alike.
  const bool exchange = ranks.empty() && (!same_rerun_value(d.loss, d.rerun_loss, tol) ||
                                          !same_rerun_value(d.norms.total, d.rerun_norm, tol));
  if (!ranks.empty() || exchange) stop_for_transient_fault(d, ranks);
}

[[noreturn]] void Trainer::stop_for_transient_fault(const DivergedStep& d,
                                                    const std::vector<int>& ranks) {
  std::vector<std::string> names;
  {
    WatchScope watch("gathering node names after a transient fault");
    names = all_node_names(world_.size);
  }
  std::vector<std::string> who, nodes, rank_list;
  std::set<std::string> seen;
  for (int r : ranks) {
    who.push_back("rank " + std::to_string(r) + " on node " + names[size_t(r)]);
    rank_list.push_back(std::to_string(r));
    if (seen.insert(names[size_t(r)]).second) nodes.push_back(names[size_t(r)]);
  }
  std::vector<std::string> quoted;
  for (const std::string& n : nodes) quoted.push_back(json_string(n));
  auto record = d.record();
  record.insert(record.end(), {{"transient_fault", "true"},
                               {"fault_ranks", "[" + join(rank_list, ", ") + "]"},
                               {"fault_nodes", "[" + join(quoted, ", ") + "]"}});
  metrics_.write(record);
  // For the batch script: the nodes to requeue without, one per line (none
  // when the fault was in the exchange between ranks).
  if (const char* file = std::getenv("FSDP_FAULTY_NODES_FILE"); lead_ && file && *file) {
    std::ofstream out(file, std::ios::trunc);
    for (const std::string& n : nodes) out << n << '\n';
  }
  char values[160];
  std::snprintf(values, sizeof values, "loss %.6g, gradient norm %.6g; rerun: %.6g, %.6g", d.loss,
                d.norms.total, d.rerun_loss, d.rerun_norm);
  const std::string where =
      ranks.empty() ? "every rank repeated its own part of the rerun but their reduction did not "
                      "(a fault in the network or a collective)"
                    : join(who, ", ") +
                          " computed another result when the step was rerun from "
                          "the same state (a device or node fault, not the data)";
  throw AgreedError("transient fault at step " + std::to_string(d.step + 1) + ": " + where + "; " +
                        d.why + "; " + values +
                        ". The step was not applied and nothing was saved; continue with --resume "
                        "auto" +
                        (nodes.empty() ? "" : " on other nodes than " + join(nodes, ", ")) +
                        " (exit status " + std::to_string(kExitTransientFault) +
                        ": slurm/h100_4node.sh requeues the job" +
                        (nodes.empty() ? "" : " without them") + ")",
                    kExitTransientFault);
}

}  // namespace fsdp
