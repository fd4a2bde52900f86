// The message of the fsdp::Error a call throws, for tests that check what a
// refusal says; "" when it throws none.
#pragma once

#include <string>

#include "common/error.h"

namespace fsdp::testing {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fsdp::testing
