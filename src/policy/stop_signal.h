// Preemption: SIGTERM (Slurm's preemption, then SIGKILL), SIGUSR1 (sent by
// slurm/h100_4node.sh before the time limit) and SIGUSR2 only set a flag; at
// a step boundary the ranks agree on it, so all of them checkpoint the same
// step. mpirun forwards SIGUSR1 and SIGUSR2 to every rank at once, but turns
// its own SIGTERM into SIGTERM then SIGKILL one second apart (docs/CLUSTER.md,
// "Stopping, preemption and hung ranks"), so SIGUSR1 is the signal for mpirun.
#pragma once

namespace fsdp {

// Idempotent; main installs them before set-up.
void install_stop_handlers();
// Under mpirun or srun: the launcher's death (kill -9 of mpirun, a lost
// orted) reaches this rank as SIGTERM, so orphaned ranks checkpoint at the
// next step and exit instead of training on unsupervised. Called by
// install_stop_handlers.
void stop_when_launcher_dies();
// The name of the signal received since start ("SIGTERM"), or nullptr.
const char* stop_signal_name();

}  // namespace fsdp
