#include "src/policy/stop_signal.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <initializer_list>

namespace fsdp {

namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) {
  g_signal = sig;
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking reads and MPI calls carry on
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  // The signal mask survives exec: a launcher or shell that blocked these
  // would leave a stop pending forever, never reaching a step boundary.
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGTERM, SIGUSR1, SIGUSR2}) sigaddset(&stops, sig);
  pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
  stop_when_launcher_dies();
}

void stop_when_launcher_dies() {
  // Only under a launcher: a lone process whose shell exits (nohup, a closed
  // terminal) must keep training.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK")) return;
  const pid_t launcher = getppid();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != launcher) raise(SIGTERM);  // it died before prctl took effect
}

const char* stop_signal_name() {
  switch (g_signal) {
    case 0:
      return nullptr;
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "a signal";
  }
}

}  // namespace fsdp
