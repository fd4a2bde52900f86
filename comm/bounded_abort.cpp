#include "comm/bounded_abort.h"

#include <future>
#include <memory>
#include <thread>
#include <utility>

namespace fsdp {

bool run_bounded(std::function<void()> step, std::chrono::duration<double> bound) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> finished = done->get_future();
  std::thread([step = std::move(step), done] {
    try {
      step();
    } catch (...) {  // a step that fails has finished all the same
    }
    done->set_value();
  }).detach();
  return finished.wait_for(bound) == std::future_status::ready;
}

AbortOutcome abort_bounded(std::timed_mutex& comm_lock, std::function<void()> abort_comm,
                           std::function<void()> end_job, std::chrono::duration<double> lock_wait,
                           std::chrono::duration<double> step_bound) {
  AbortOutcome out;
  out.locked = comm_lock.try_lock_for(lock_wait);
  if (out.locked) out.comm_aborted = run_bounded(std::move(abort_comm), step_bound);
  out.job_ended = run_bounded(std::move(end_job), step_bound);
  return out;
}

}  // namespace fsdp
