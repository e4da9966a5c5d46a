#include "eval/eval_options.h"

#include <algorithm>
#include <charconv>

#include "attention/policy.h"
#include "attention/policy_spec.h"
#include "core/error.h"
#include "eval/needle.h"

namespace skim::eval {

const std::vector<std::string>& known_tasks() {
  static const std::vector<std::string> tasks = {"ppl", "error", "passkey", "needle", "agree"};
  return tasks;
}

namespace {

std::vector<std::string> split_list(const std::string& list, const std::string& flag) {
  std::vector<std::string> items;
  size_t b = 0;
  while (true) {
    size_t e = list.find(',', b);
    std::string item = list.substr(b, e == std::string::npos ? std::string::npos : e - b);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    SKIM_REQUIRE(!item.empty(), "{} '{}': empty item in the list", flag, list);
    items.push_back(item);
    if (e == std::string::npos) break;
    b = e + 1;
  }
  return items;
}

template <typename T>
T parse_number(const std::string& s, const std::string& flag, const std::string& list) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  SKIM_REQUIRE(ec == std::errc() && end == s.data() + s.size(), "{} '{}': '{}' is not a number", flag, list, s);
  return v;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

std::set<std::string> parse_tasks(const std::string& list) {
  std::set<std::string> tasks;
  for (const std::string& t : split_list(list, "--tasks")) {
    if (t == "all") {
      tasks.insert(known_tasks().begin(), known_tasks().end());
      continue;
    }
    SKIM_REQUIRE(std::find(known_tasks().begin(), known_tasks().end(), t) != known_tasks().end(),
                 "--tasks: unknown task '{}' (available: {}, all)", t, joined(known_tasks()));
    tasks.insert(t);
  }
  return tasks;
}

std::vector<std::string> parse_name_list(const std::string& list, const std::string& flag) {
  return split_list(list, flag);
}

std::vector<int> parse_int_list(const std::string& list, const std::string& flag) {
  std::vector<int> v;
  for (const std::string& s : split_list(list, flag)) v.push_back(parse_number<int>(s, flag, list));
  return v;
}

std::vector<double> parse_double_list(const std::string& list, const std::string& flag) {
  std::vector<double> v;
  for (const std::string& s : split_list(list, flag)) v.push_back(parse_number<double>(s, flag, list));
  return v;
}

std::vector<std::string> parse_policies(const std::string& list) {
  std::vector<std::string> given = split_policy_list(list, "--policy");
  std::vector<std::string> out = {"dense"};
  for (const std::string& p : given) {
    make_policy(p);  // a bad policy fails before any model loads
    if (p == "dense") continue;
    SKIM_REQUIRE(std::find(out.begin(), out.end(), p) == out.end(), "--policy: '{}' is listed twice", p);
    out.push_back(p);
  }
  return out;
}

void validate(const EvalOptions& o) {
  SKIM_REQUIRE(!o.tasks.empty(), "--tasks: no task given");
  SKIM_REQUIRE(!o.policies.empty() && o.policies[0] == "dense", "--policy: dense must come first (the baseline)");
  SKIM_REQUIRE(o.ctx >= 16, "--ctx must be at least 16 tokens, got {}", o.ctx);
  if (o.has("ppl") || o.has("error")) {
    SKIM_REQUIRE(o.decode_tokens >= 1 && o.decode_tokens < o.ctx,
                 "--decode-tokens must be in [1, --ctx - 1] = [1, {}], got {}", o.ctx - 1, o.decode_tokens);
    SKIM_REQUIRE(o.buckets >= 1 && o.buckets <= o.decode_tokens,
                 "--buckets must be in [1, --decode-tokens] = [1, {}], got {}", o.decode_tokens, o.buckets);
  }
  SKIM_REQUIRE(!o.locality || o.has("ppl") || o.has("error"),
               "--locality measures the teacher-forced windows: add ppl or error to --tasks");
  if (o.has("agree"))
    SKIM_REQUIRE(o.agree_tokens >= 1 && o.agree_tokens < o.ctx,
                 "--agree-tokens must be in [1, --ctx - 1] = [1, {}], got {}", o.ctx - 1, o.agree_tokens);
  if (o.runs_windows()) SKIM_REQUIRE(o.docs >= 1, "--docs must be >= 1, got {}", o.docs);
  if (o.has("passkey") || o.has("needle")) {  // the retrieval tasks share lengths, prompts and depths
    SKIM_REQUIRE(!o.lengths.empty(), "--lengths: no length given");
    const int shortest = o.has("needle") ? 192 : 64;
    for (int l : o.lengths) {
      SKIM_REQUIRE(l >= shortest, "--lengths: {} is too short for a retrieval prompt (at least {} tokens)", l, shortest);
      SKIM_REQUIRE(l <= o.ctx, "--lengths: {} is over --ctx {}", l, o.ctx);
    }
    SKIM_REQUIRE(o.prompts >= 1, "--prompts must be >= 1, got {}", o.prompts);
    SKIM_REQUIRE(!o.depths.empty(), "--depths: no depth given");
    for (double d : o.depths) SKIM_REQUIRE(d >= 0 && d <= 1, "--depths: {} is outside [0, 1]", d);
  }
  if (o.has("needle")) {
    SKIM_REQUIRE(!o.needles.empty(), "--needles: no needle kind given");
    for (const std::string& k : o.needles)
      SKIM_REQUIRE(std::find(needle_kinds().begin(), needle_kinds().end(), k) != needle_kinds().end(),
                   "--needles: unknown kind '{}' (kinds: number, word, code)", k);
    SKIM_REQUIRE(o.needle_tokens >= 1 && o.needle_tokens <= 256, "--needle-tokens must be in [1, 256], got {}",
                 o.needle_tokens);
  }
  if (o.has("passkey")) {
    SKIM_REQUIRE(!o.keys.empty(), "--keys: no key count given");
    for (int k : o.keys) SKIM_REQUIRE(k >= 1 && k <= 20, "--keys: {} is outside [1, 20]", k);
    SKIM_REQUIRE(o.answer_tokens >= 1 && o.answer_tokens <= 64, "--answer-tokens must be in [1, 64], got {}",
                 o.answer_tokens);
  }
}

}  // namespace skim::eval
