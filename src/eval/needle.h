// Retrieval the way instruct models are used: a needle (a sentence holding a value) hidden at
// a depth in held-out text, the text and a question sent as one user turn through the model's
// own chat template, the answer generated under the policy and right when it contains the
// value. Three kinds of needle, so that no policy passes by luck:
//
//   number  "# The secret pass key is 48213. Remember it."           -> 48213
//   word    "# The secret word is "juniper". Remember it."           -> juniper
//   code    'vault_code = "QX-7142"' (a line of code)                 -> QX-7142
//
// The haystack is code (the held-out data), so the two sentences are comment lines.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/corpus.h"

namespace skim {
class Tokenizer;
}

namespace skim::eval {

// The kinds by name, in the order they are reported.
const std::vector<std::string>& needle_kinds();

struct NeedleCase {
  std::string kind = "number";
  double depth = 0.5;  // fraction of the haystack's tokens before the needle
  uint64_t seed = 0;   // haystack start and value
};

// The chat prompt of one user message, as the model's template renders it with the generation
// prompt (the assistant's turn opened).
using ChatRender = std::function<std::string(const std::string& user_message)>;

struct NeedlePrompt {
  std::string text;      // the rendered chat prompt
  std::string value;     // what a right answer contains
  std::string question;  // the user turn's last part; the text's suffix from it is decoded
  size_t question_bytes = 0;  // bytes of text from the question to the end (template's tail too)
  size_t needle_offset = 0;   // the needle line's first byte in text
  size_t needle_bytes = 0;    // and its length
  double depth = 0;           // as placed
};

NeedlePrompt build_needle_prompt(const Corpus& corpus, const NeedleCase& c, size_t haystack_tokens,
                                 const Tokenizer& tok, const ChatRender& chat);

// The prompt tokenised (as transformers tokenises a rendered chat: no special tokens added,
// those in the text recognised) and fitted within `length` tokens by shortening the haystack.
struct TokenizedNeedle {
  NeedlePrompt prompt;
  std::vector<int> ids;
  size_t question_start = 0;  // ids[question_start..] spell at least the question and the tail
  size_t needle_begin = 0, needle_end = 0;  // tokens [begin, end) spell at least the needle line
};
TokenizedNeedle tokenize_needle(const Corpus& corpus, const NeedleCase& c, size_t length, const Tokenizer& tok,
                                const ChatRender& chat);

// Whether an answer holds the value: as a whole number (digits not part of a longer number),
// a whole word (any case), or the exact string.
bool needle_found(std::string_view answer, const std::string& kind, std::string_view value);

}  // namespace skim::eval
