// Where a check fired, as a path a reader can open: __FILE__ relative to the
// repository root (CMake passes FSDP_SOURCE_DIR), so messages read
// "model/cuda/gemm.cpp:120" rather than a build machine's absolute path.
#pragma once

#include <string_view>

namespace fsdp {

constexpr std::string_view source_path(std::string_view file) {
#ifdef FSDP_SOURCE_DIR
  constexpr std::string_view root = FSDP_SOURCE_DIR;
  if (file.substr(0, root.size()) == root) file.remove_prefix(root.size());
#endif
  return file;
}

}  // namespace fsdp
