// One error type for everything a user can get wrong (files, flags, data) and
// for library calls that fail. main() prints it as one line,
// "fsdptrain: error: <what>", and exits non-zero.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "common/source_site.h"

namespace fsdp {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An error every rank raises alike, from values they already agreed on
// (a global loss, a collective check): main() prints it once, on rank 0, and
// all ranks exit normally instead of aborting the job.
class AgreedError : public Error {
 public:
  explicit AgreedError(const std::string& what, int exit_status = 1)
      : Error(what), exit_status_(exit_status) {}
  // What the program exits with: 1, or a status a batch script acts on
  // (src/trainer/trainer.h lists them).
  int exit_status() const { return exit_status_; }

 private:
  int exit_status_;
};

// Builds a message from pieces: throw_error("file ", path, " has no dataset ", name).
template <typename... Parts>
[[noreturn]] void throw_error(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw Error(os.str());
}

template <typename... Parts>
[[noreturn]] void throw_agreed_error(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  throw AgreedError(os.str());
}

}  // namespace fsdp

// Internal invariants (programming errors, not user errors).
#define FSDP_CHECK(cond, ...)                                                                    \
  do {                                                                                           \
    if (!(cond))                                                                                 \
      ::fsdp::throw_error("internal check failed: " #cond " at ", ::fsdp::source_path(__FILE__), \
                          ":", __LINE__, " " __VA_OPT__(, ) __VA_ARGS__);                        \
  } while (0)
