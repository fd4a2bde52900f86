// fsdp_options_doc: prints docs/OPTIONS.md, the reference of every option,
// from the option table itself (src/options/options.h, options_reference), so that
// the document cannot drift from the program: CTest options_reference fails
// when the committed file differs from this output.
//   build/tools/fsdp_options_doc > docs/OPTIONS.md
#include <iostream>

#include "src/options/options.h"

int main() {
  std::cout << fsdp::options_reference();
  return 0;
}
