// Whether two token files were made with the same tokenizer, so that their
// ids may be mixed in one stream or a validation loss compared with training.
//
// Names alone cannot say: prepare_data.py names a Hugging Face or BPE
// tokenizer after its per-prefix copy (owt_tokenizer.json, web_tokenizer.json),
// so one tokenizer has many names, and two BPEs trained on different text under
// the same prefix in two folders share one. What decides is the content: the
// `tokenizer_sha256` attribute (the SHA-256 of the file's decode table,
// /token_offsets as little-endian int64 then /token_bytes), and for files made
// before it, the decode tables themselves, read only where names differ.
#pragma once

#include <cstdint>
#include <string>

namespace fsdp {

// What a token file says about its tokenizer.
struct TokenizerId {
  std::string file;  // to read the decode table from, where needed
  int64_t vocab_size = 0;
  std::string name;    // the `tokenizer` attribute, "" when absent
  std::string sha256;  // the `tokenizer_sha256` attribute, "" when absent
  // The `text_encoder` attribute: how text becomes ids with this tokenizer
  // (data/text_encoder.h), "" when the file does not say.
  std::string text_encoder;

  // "'NAME'", with the start of the hash when there is one.
  std::string describe() const;
};

// False only on evidence: different hashes, different decode tables, or
// (with neither) different names. Throws fsdp::Error for a damaged table.
bool same_tokenizer(const TokenizerId& a, const TokenizerId& b);

}  // namespace fsdp
