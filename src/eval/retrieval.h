// Passkey retrieval in the format the demo model learned (models/demo-code-28m/README.md):
// definition lines `SECRET_<NAME> = <5 digits>` inserted at line boundaries of held-out text
// at chosen depths, the prompt ending with `\nassert SECRET_<NAME> ==`; the answer is right
// when the greedy continuation starts with ` <value>`. One key, or several with one asked.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "eval/corpus.h"

namespace skim {
class Tokenizer;
}

namespace skim::eval {

// The names the demo model was trained with.
const std::vector<std::string>& secret_names();

struct PasskeyCase {
  int keys = 1;        // definition lines in the prompt
  double depth = 0.5;  // where the asked one goes: fraction of the haystack's tokens
  uint64_t seed = 0;   // haystack, names, values and the other keys' depths follow from it
};

struct Needle {
  std::string name;   // SECRET_MAPLE
  std::string value;  // 48213
  double depth = 0;   // as placed: tokens of haystack before it / haystack tokens
  size_t offset = 0;  // byte offset of its line in the prompt text
};

struct PasskeyPrompt {
  std::string text;  // haystack with the definition lines, then the question
  std::vector<Needle> needles;  // in text order
  size_t asked = 0;             // index into needles
  std::string question;         // "\nassert SECRET_MAPLE ==" (the text ends with it)
  std::string answer;           // " 48213": what the continuation must start with
  size_t haystack_tokens = 0;   // as counted while building
};

using TokenCounter = std::function<size_t(std::string_view)>;

// Lines of corpus text (each ending with '\n') from a start drawn from `rng`, running on into
// the next documents, until they hold at least `tokens` tokens as `count` measures them; each
// line's count goes to line_tokens.
std::vector<std::string> haystack_lines(const Corpus& corpus, std::mt19937_64& rng, size_t tokens,
                                        const TokenCounter& count, std::vector<size_t>& line_tokens);
// cumulative[i]: tokens before line i (one more entry than lines).
std::vector<size_t> cumulative_tokens(const std::vector<size_t>& line_tokens);
// The line boundary whose tokens before it are nearest to depth x all tokens.
size_t line_at_depth(const std::vector<size_t>& cumulative, double depth);

// Builds a prompt whose haystack holds at least `haystack_tokens` tokens (as `count` measures
// lines) of corpus text, starting at a line chosen by the seed and running on into the next
// documents when one ends.
PasskeyPrompt build_passkey_prompt(const Corpus& corpus, const PasskeyCase& c, size_t haystack_tokens,
                                   const TokenCounter& count);

// The prompt tokenized and cut to at most `length` tokens (BOS included, as encode_prompt
// adds it): the haystack is shortened until the whole prompt fits.
struct TokenizedPasskey {
  PasskeyPrompt prompt;
  std::vector<int> ids;
  size_t question_start = 0;  // ids[question_start..] spell at least the question
};
TokenizedPasskey tokenize_passkey(const Corpus& corpus, const PasskeyCase& c, size_t length,
                                  const Tokenizer& tok);

// First index i such that the bytes of ids[i..] cover at least the last `suffix_bytes` bytes
// of the text; at most ids.size() - 1 so at least one token is left.
size_t suffix_token_start(const Tokenizer& tok, const std::vector<int>& ids, size_t suffix_bytes);

bool answer_matches(std::string_view generated, std::string_view answer);

// Accuracy by context length and key count, with depth detail.
struct RetrievalCell {
  int correct = 0, total = 0;
  std::map<double, std::pair<int, int>> by_depth;  // depth -> (correct, total)
  double accuracy() const { return total ? double(correct) / total : 0; }
};
struct RetrievalTally {
  std::map<int, std::map<int, RetrievalCell>> cells;  // keys -> length -> cell
  void add(int keys, int length, double depth, bool correct);
};

}  // namespace skim::eval
