#include "data/tokenizer_match.h"

#include <optional>

#include "data/token_decoder.h"

namespace fsdp {

std::string TokenizerId::describe() const {
  std::string s = "'" + name + "'";
  if (!sha256.empty()) s += " (sha256 " + sha256.substr(0, 12) + "...)";
  return s;
}

bool same_tokenizer(const TokenizerId& a, const TokenizerId& b) {
  if (!a.sha256.empty() && !b.sha256.empty()) return a.sha256 == b.sha256;
  // Files from before the hash: the same name is taken as the same tokenizer,
  // as it always was, so a stream of a thousand such shards reads no table.
  if (a.name == b.name) return true;
  std::string why_not;
  const std::optional<TokenDecoder> ta = TokenDecoder::open(a.file, a.vocab_size, a.name, &why_not);
  const std::optional<TokenDecoder> tb = TokenDecoder::open(b.file, b.vocab_size, b.name, &why_not);
  if (ta && tb) return *ta == *tb;
  return a.name.empty() || b.name.empty();
}

}  // namespace fsdp
