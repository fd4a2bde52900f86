// encode_text FILE.h5 [TEXT ...]: the ids of each TEXT with FILE's own text
// encoder (data/text_encoder.h), one line per TEXT, for text_encoder_test.py
// to compare with the real tokenizers. Exit 2 with the reason when FILE has
// no encoder; 1 with the error for a bad file or text.
#include <cstdio>
#include <string>

#include "common/error.h"
#include "data/text_encoder.h"
#include "data/token_dataset.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: encode_text FILE.h5 [TEXT ...]\n");
    return 1;
  }
  try {
    const fsdp::TokenDataset ds =
        fsdp::TokenDataset::open({argv[1], "/tokens"}, "encode_text", fsdp::TokenScan::none);
    std::string why_not;
    const auto encoder = fsdp::TextEncoder::open(ds.tokenizer_id(), ds.eos_id(), &why_not);
    if (!encoder) {
      std::fprintf(stderr, "%s\n", why_not.c_str());
      return 2;
    }
    for (int i = 2; i < argc; ++i) {
      std::string line;
      for (int32_t id : encoder->encode(argv[i]))
        line += (line.empty() ? "" : " ") + std::to_string(id);
      std::printf("%s\n", line.c_str());
    }
  } catch (const fsdp::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
