// The three Unicode classes GPT-2's pre-tokenizer pattern is written in:
// letters (\p{L}), numbers (\p{N}) and white space (\s, the White_Space
// property, as the regex engines of tiktoken and Hugging Face tokenizers read
// it). Letters and numbers are range tables generated from Unicode's data
// (data/unicode_classes.cpp, tools/gen_unicode_classes.py); white space is
// the 25 code points listed here.
#pragma once

namespace fsdp {

bool is_unicode_letter(char32_t c);
bool is_unicode_number(char32_t c);

inline bool is_unicode_space(char32_t c) {
  return (c >= 0x9 && c <= 0xD) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace fsdp
