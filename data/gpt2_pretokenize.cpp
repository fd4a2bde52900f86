#include "data/gpt2_pretokenize.h"

#include <cstdint>

#include "data/unicode_classes.h"

namespace fsdp {
namespace {

// One code point and where its bytes start.
struct CodePoint {
  char32_t c;
  size_t at;
};

std::vector<CodePoint> code_points(std::string_view s) {
  std::vector<CodePoint> out;
  for (size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t len = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
    char32_t c = len == 1 ? b : len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    for (size_t k = 1; k < len && i + k < s.size(); ++k)
      c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back({c, i});
    i += len;
  }
  return out;
}

enum class Class { letter, number, space, other };

Class class_of(char32_t c) {
  if (is_unicode_letter(c)) return Class::letter;
  if (is_unicode_number(c)) return Class::number;
  if (is_unicode_space(c)) return Class::space;
  return Class::other;
}

// Length of the contraction ('s 't 're 've 'm 'll 'd) at i, or 0.
size_t contraction(const std::vector<CodePoint>& cp, size_t i) {
  if (cp[i].c != U'\'' || i + 1 >= cp.size()) return 0;
  const char32_t a = cp[i + 1].c;
  if (a == U's' || a == U't' || a == U'm' || a == U'd') return 2;
  const char32_t b = i + 2 < cp.size() ? cp[i + 2].c : 0;
  if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l')) return 3;
  return 0;
}

}  // namespace

std::vector<std::string_view> gpt2_pieces(std::string_view text) {
  const std::vector<CodePoint> cp = code_points(text);
  const size_t n = cp.size();
  std::vector<std::string_view> pieces;
  auto emit = [&](size_t from, size_t to) {  // code points [from, to)
    const size_t end = to < n ? cp[to].at : text.size();
    pieces.push_back(text.substr(cp[from].at, end - cp[from].at));
  };
  for (size_t i = 0; i < n;) {
    if (const size_t len = contraction(cp, i)) {
      emit(i, i + len);
      i += len;
      continue;
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a
    // run of one class (the three classes are disjoint, so the first code
    // point after the space picks the alternative).
    const size_t k = cp[i].c == U' ' ? i + 1 : i;
    if (k < n && class_of(cp[k].c) != Class::space) {
      const Class run = class_of(cp[k].c);
      size_t j = k + 1;
      while (j < n && class_of(cp[j].c) == run) ++j;
      emit(i, j);
      i = j;
      continue;
    }
    // White space. `\s+(?!\S)` takes the whole run at the end of the text,
    // else all of it but the last code point (which then leads the next
    // word), when that leaves any; otherwise `\s+` takes the run.
    size_t q = i;
    while (q < n && class_of(cp[q].c) == Class::space) ++q;
    const size_t end = q == n || q - i < 2 ? q : q - 1;
    emit(i, end);
    i = end;
  }
  return pieces;
}

}  // namespace fsdp
