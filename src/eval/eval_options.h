// What `skim eval` measures and at which sizes; the list flags parsed and checked here so
// that the library and the CLI give the same messages (each names its flag).
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

namespace skim::eval {

struct EvalOptions {
  std::vector<std::string> policies = {"dense"};  // dense first: the baseline
  std::set<std::string> tasks = {"ppl", "error", "passkey", "agree"};
  int ctx = 16384;              // tokens of the perplexity / agreement window
  int decode_tokens = 2048;     // teacher-forced decode steps (ppl, error)
  int buckets = 4;              // perplexity position buckets
  std::vector<int> lengths = {4096, 8192, 16384};  // retrieval prompt lengths
  int prompts = 40;             // retrieval prompts per length and key count
  std::vector<double> depths = {0.1, 0.3, 0.5, 0.7, 0.9};
  std::vector<int> keys = {1, 4};  // passkey variants: definition lines per prompt
  int answer_tokens = 6;        // greedy tokens generated for a passkey answer
  std::vector<std::string> needles = {"number", "word", "code"};  // needle task: kinds
  int needle_tokens = 32;       // greedy tokens at most for a needle answer (EOS ends it)
  int agree_tokens = 256;       // greedy tokens compared with dense
  // How a retrieval prompt's question reaches the model. true: prefilled densely with the
  // haystack, as a server does (skim prefills densely whatever the policy), and only the
  // prompt's last token and the answer are decoded under the policy, so every answer token
  // comes from the policy; false: its tokens are decode steps under the policy too (the
  // policy also reads the haystack for the question: a stricter test than serving).
  bool question_dense = true;
  bool coverage = false;  // needle task: measure where the needle's attention mass went (slow)
  bool locality = false;  // ppl / error windows: where the chosen keys sit, step after step
  int docs = 1;                 // text windows for ppl / error / agree
  uint64_t seed = 0;
  std::vector<std::filesystem::path> data;

  bool has(const std::string& task) const { return tasks.count(task) > 0; }
  bool runs_windows() const { return has("ppl") || has("error") || has("agree"); }
};

const std::vector<std::string>& known_tasks();
std::set<std::string> parse_tasks(const std::string& list);  // "ppl,passkey"; "all"
std::vector<int> parse_int_list(const std::string& list, const std::string& flag);
std::vector<std::string> parse_name_list(const std::string& list, const std::string& flag);
std::vector<double> parse_double_list(const std::string& list, const std::string& flag);
// Policy list with dense moved or added to the front; each policy string is checked.
std::vector<std::string> parse_policies(const std::string& list);
// Ranges and consistency (lengths over --ctx, buckets over decode tokens, ...).
void validate(const EvalOptions& o);

}  // namespace skim::eval
