// Preemption: SIGTERM (Slurm's preemption, then SIGKILL) and SIGUSR1 (sent by
// slurm/h100_4node.sh before the time limit) only set a flag; at a step
// boundary the ranks agree on it, so all of them checkpoint the same step.
#pragma once

namespace fsdp {

void install_stop_handlers();
// The name of the signal received since start ("SIGTERM"), or nullptr.
const char* stop_signal_name();

}  // namespace fsdp
