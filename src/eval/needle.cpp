#include "eval/needle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <random>

#include "core/error.h"
#include "eval/retrieval.h"
#include "tokenizer/tokenizer.h"

namespace skim::eval {

const std::vector<std::string>& needle_kinds() {
  static const std::vector<std::string> kinds = {"number", "word", "code"};
  return kinds;
}

namespace {

// Words a model is unlikely to guess from code.
const std::vector<std::string>& secret_words() {
  static const std::vector<std::string> w = {"juniper", "lantern", "saffron", "harbor", "quartz",  "meadow",
                                             "falcon",  "cobalt",  "thistle", "ember",  "glacier", "walnut",
                                             "orchid",  "pebble",  "tundra",  "velvet", "marble",  "cinder"};
  return w;
}

struct NeedleLine {
  std::string line, value, question;
};

NeedleLine make_needle(const std::string& kind, std::mt19937_64& rng) {
  if (kind == "number") {
    const std::string v = std::to_string(std::uniform_int_distribution<int>(10000, 99999)(rng));
    return {"# The secret pass key is " + v + ". Remember it.\n", v,
            "What is the secret pass key in the text above? Answer with the number only."};
  }
  if (kind == "word") {
    const std::string v = secret_words()[rng() % secret_words().size()];
    return {"# The secret word is \"" + v + "\". Remember it.\n", v,
            "What is the secret word in the text above? Answer with the word only."};
  }
  if (kind == "code") {
    const char letters[] = "ABCDEFGHJKLMNPQRSTUVWXYZ";
    std::string v;
    v += letters[rng() % 24];
    v += letters[rng() % 24];
    v += "-" + std::to_string(std::uniform_int_distribution<int>(1000, 9999)(rng));
    return {"vault_code = \"" + v + "\"\n", v,
            "In the code above, what string is assigned to vault_code? Answer with the string only."};
  }
  fail("--needles: unknown needle kind '{}' (kinds: number, word, code)", kind);
}

bool word_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

NeedlePrompt build_needle_prompt(const Corpus& corpus, const NeedleCase& c, size_t haystack_tokens,
                                 const Tokenizer& tok, const ChatRender& chat) {
  SKIM_REQUIRE(c.depth >= 0 && c.depth <= 1, "--depths: {} is outside [0, 1]", c.depth);
  std::mt19937_64 rng(c.seed);
  TokenCounter count = [&tok](std::string_view s) { return tok.encode(s, false).size(); };
  std::vector<size_t> line_tokens;
  const std::vector<std::string> lines = haystack_lines(corpus, rng, std::max<size_t>(haystack_tokens, 1), count, line_tokens);
  const std::vector<size_t> cumulative = cumulative_tokens(line_tokens);
  const size_t at = line_at_depth(cumulative, c.depth);
  const NeedleLine n = make_needle(c.kind, rng);

  std::string document;
  for (size_t i = 0; i <= lines.size(); ++i) {
    if (i == at) document += n.line;
    if (i < lines.size()) document += lines[i];
  }
  NeedlePrompt p;
  p.value = n.value;
  p.question = n.question;
  p.depth = cumulative.back() ? double(cumulative[at]) / double(cumulative.back()) : 0;
  p.text = chat("Read this file.\n\n" + document + "\n" + n.question);
  p.needle_offset = p.text.find(n.line);
  p.needle_bytes = n.line.size();
  SKIM_REQUIRE(p.needle_offset != std::string::npos, "the chat template changed the needle line");
  const size_t q = p.text.rfind(n.question);
  SKIM_REQUIRE(q != std::string::npos, "the chat template dropped the question from the user turn");
  p.question_bytes = p.text.size() - q;
  return p;
}

TokenizedNeedle tokenize_needle(const Corpus& corpus, const NeedleCase& c, size_t length, const Tokenizer& tok,
                                const ChatRender& chat) {
  // Aim the haystack, then correct it by the miss until the prompt fits within a few tokens
  // (lines counted one by one, and the template's own tokens, make the first aim approximate).
  const size_t close_enough = 8;
  size_t haystack = length > 96 ? length - 96 : 1;
  std::optional<TokenizedNeedle> best;
  for (int attempt = 0; attempt < 12; ++attempt) {
    TokenizedNeedle t;
    t.prompt = build_needle_prompt(corpus, c, haystack, tok, chat);
    t.ids = tok.encode(t.prompt.text, true);
    const size_t n = t.ids.size();
    if (n <= length) {
      t.question_start = suffix_token_start(tok, t.ids, t.prompt.question_bytes);
      const size_t size = t.prompt.text.size(), after = t.prompt.needle_offset + t.prompt.needle_bytes;
      t.needle_begin = suffix_token_start(tok, t.ids, size - t.prompt.needle_offset);
      t.needle_end = std::min(t.ids.size(), suffix_token_start(tok, t.ids, size - after) + 1);
      if (!best || n > best->ids.size()) best = std::move(t);
      if (length - n <= close_enough) break;
      haystack += length - n;
    } else {
      const size_t excess = n - length + 1;
      haystack = haystack > excess ? haystack - excess : 1;
    }
  }
  SKIM_REQUIRE(best.has_value(), "--lengths: could not fit a needle prompt into {} tokens", length);
  return std::move(*best);
}

bool needle_found(std::string_view answer, const std::string& kind, std::string_view value) {
  if (kind == "code") return answer.find(value) != std::string_view::npos;
  std::string a(answer), v(value);
  if (kind == "word") {
    std::transform(a.begin(), a.end(), a.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
    std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  }
  for (size_t at = a.find(v); at != std::string::npos; at = a.find(v, at + 1)) {
    const bool starts = at == 0 || !word_char(a[at - 1]);
    const bool ends = at + v.size() == a.size() || !word_char(a[at + v.size()]);
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace skim::eval
