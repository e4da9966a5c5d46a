#include "eval/retrieval.h"

#include <algorithm>
#include <optional>
#include <random>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace skim::eval {

const std::vector<std::string>& secret_names() {
  static const std::vector<std::string> names = {
      "alpha", "bravo",  "cedar",   "delta", "ember", "falcon", "garnet", "harbor",  "indigo", "juniper",
      "kestrel", "lumen", "maple", "nimbus", "onyx",  "pepper", "quartz", "raven", "saffron", "tundra"};
  return names;
}

namespace {

std::string upper(std::string s) {
  for (char& ch : s) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  return s;
}

}  // namespace

std::vector<std::string> haystack_lines(const Corpus& corpus, std::mt19937_64& rng, size_t tokens,
                                        const TokenCounter& count, std::vector<size_t>& line_tokens) {
  const size_t docs = corpus.documents.size();
  size_t doc = rng() % docs;
  std::vector<std::string_view> lines = split_lines(corpus.documents[doc].text);
  size_t line = rng() % lines.size();
  std::vector<std::string> out;
  size_t total = 0, guard = 0;
  while (total < tokens) {
    if (line == lines.size()) {  // next document
      doc = (doc + 1) % docs;
      lines = split_lines(corpus.documents[doc].text);
      line = 0;
      SKIM_REQUIRE(++guard < 4 * docs + 64 || total > 0, "--data: the data has no text lines");
      continue;
    }
    std::string l(lines[line++]);
    if (l.back() != '\n') l += '\n';
    size_t n = count(l);
    out.push_back(std::move(l));
    line_tokens.push_back(n);
    total += n;
  }
  return out;
}

size_t line_at_depth(const std::vector<size_t>& cumulative, double depth) {
  const double target = depth * double(cumulative.back());
  size_t at = size_t(std::lower_bound(cumulative.begin(), cumulative.end(), size_t(std::llround(target))) -
                     cumulative.begin());
  if (at > 0 && target - double(cumulative[at - 1]) < double(cumulative[at]) - target) --at;
  return std::min(at, cumulative.size() - 1);
}

std::vector<size_t> cumulative_tokens(const std::vector<size_t>& line_tokens) {
  std::vector<size_t> c(line_tokens.size() + 1, 0);
  for (size_t i = 0; i < line_tokens.size(); ++i) c[i + 1] = c[i] + line_tokens[i];
  return c;
}

PasskeyPrompt build_passkey_prompt(const Corpus& corpus, const PasskeyCase& c, size_t haystack_tokens,
                                   const TokenCounter& count) {
  SKIM_REQUIRE(c.keys >= 1 && size_t(c.keys) <= secret_names().size(), "--keys: {} keys, allowed 1 to {}",
               c.keys, secret_names().size());
  SKIM_REQUIRE(c.depth >= 0 && c.depth <= 1, "--depths: {} is outside [0, 1]", c.depth);
  std::mt19937_64 rng(c.seed);
  std::vector<size_t> line_tokens;
  std::vector<std::string> lines = haystack_lines(corpus, rng, std::max<size_t>(haystack_tokens, 1), count, line_tokens);

  // Names and values; the asked key is the first drawn, placed at the requested depth, the
  // others at seeded depths over the rest of the haystack.
  std::vector<std::string> names = secret_names();
  std::shuffle(names.begin(), names.end(), rng);
  std::uniform_int_distribution<int> value(10000, 99999);
  std::uniform_real_distribution<double> other_depth(0.05, 0.95);
  struct Placed {
    Needle needle;
    size_t line;
    bool asked;
  };
  const std::vector<size_t> cumulative = cumulative_tokens(line_tokens);  // tokens before line i
  const size_t total = cumulative.back();
  std::vector<Placed> placed;
  for (int k = 0; k < c.keys; ++k) {
    const size_t at = line_at_depth(cumulative, k == 0 ? c.depth : other_depth(rng));
    Needle n;
    n.name = "SECRET_" + upper(names[size_t(k)]);
    n.value = std::to_string(value(rng));
    n.depth = total ? double(cumulative[at]) / double(total) : 0;
    placed.push_back({n, at, k == 0});
  }
  std::stable_sort(placed.begin(), placed.end(), [](const Placed& a, const Placed& b) { return a.line < b.line; });

  PasskeyPrompt p;
  p.haystack_tokens = total;
  size_t next = 0;
  for (size_t i = 0; i <= lines.size(); ++i) {
    for (; next < placed.size() && placed[next].line == i; ++next) {
      Needle n = placed[next].needle;
      n.offset = p.text.size();
      p.text += n.name + " = " + n.value + "\n";
      if (placed[next].asked) p.asked = p.needles.size();
      p.needles.push_back(std::move(n));
    }
    if (i < lines.size()) p.text += lines[i];
  }
  const Needle& asked = p.needles[p.asked];
  // The haystack ends with '\n', so the text ends with "\nassert NAME ==" (no trailing
  // space: the space belongs to the number's first token).
  p.question = "\nassert " + asked.name + " ==";
  p.text += p.question.substr(1);
  p.answer = " " + asked.value;
  return p;
}

size_t suffix_token_start(const Tokenizer& tok, const std::vector<int>& ids, size_t suffix_bytes) {
  size_t covered = 0, i = ids.size();
  while (i > 1 && covered < suffix_bytes) covered += tok.token_bytes(ids[--i]).size();
  return std::min(i, ids.size() - 1);
}

TokenizedPasskey tokenize_passkey(const Corpus& corpus, const PasskeyCase& c, size_t length,
                                  const Tokenizer& tok) {
  TokenCounter count = [&tok](std::string_view s) { return tok.encode(s, false).size(); };
  // Lines tokenized one by one count a little differently from the whole text, so aim, then
  // correct the haystack by the miss until the prompt fits within a few tokens of `length`.
  const size_t close_enough = 8;
  size_t reserve = 8 + size_t(c.keys) * 12;
  size_t haystack = length > reserve ? length - reserve : 1;
  std::optional<TokenizedPasskey> best;
  for (int attempt = 0; attempt < 12; ++attempt) {
    TokenizedPasskey t;
    t.prompt = build_passkey_prompt(corpus, c, haystack, count);
    t.ids = tok.encode_prompt("");  // BOS when the model's template adds one
    std::vector<int> body = tok.encode(t.prompt.text, false);
    t.ids.insert(t.ids.end(), body.begin(), body.end());
    const size_t n = t.ids.size();
    if (n <= length) {
      t.question_start = suffix_token_start(tok, t.ids, t.prompt.question.size());
      if (!best || n > best->ids.size()) best = std::move(t);
      if (length - n <= close_enough) break;
      haystack += length - n;
    } else {
      size_t excess = n - length + 1;
      haystack = haystack > excess ? haystack - excess : 1;
    }
  }
  SKIM_REQUIRE(best.has_value(), "--lengths: could not fit a passkey prompt into {} tokens", length);
  return std::move(*best);
}

bool answer_matches(std::string_view generated, std::string_view answer) {
  return generated.substr(0, answer.size()) == answer;
}

void RetrievalTally::add(int keys, int length, double depth, bool correct) {
  RetrievalCell& c = cells[keys][length];
  c.correct += correct;
  c.total += 1;
  auto& d = c.by_depth[depth];
  d.first += correct;
  d.second += 1;
}

}  // namespace skim::eval
