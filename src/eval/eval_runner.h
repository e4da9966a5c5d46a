// Runs every requested task for every policy against dense, on one engine. Each text window
// and each passkey prompt is prefilled once, densely, and forked per policy, so all policies
// start from the identical cache (prefill is dense whatever the policy).
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "eval/agreement.h"
#include "eval/corpus.h"
#include "eval/eval_options.h"
#include "eval/needle.h"
#include "eval/needle_coverage.h"
#include "eval/output_error.h"
#include "eval/perplexity.h"
#include "eval/retrieval.h"
#include "eval/selection_locality.h"
#include "eval/work.h"

namespace skim {
class Engine;
}

namespace skim::eval {

struct PolicyResult {
  std::string policy;
  std::optional<BucketedNll> nll;             // task ppl
  std::optional<OutputErrorMeter> error;      // task error
  std::optional<AgreementTally> agreement;    // task agree
  RetrievalTally retrieval;                   // task passkey: keys -> length
  RetrievalTally needle;                      // task needle: kind (index into needles) -> length
  // --coverage: where the needle's attention mass went, over the answers found and lost.
  std::optional<NeedleCoverageMeter> coverage_found, coverage_lost;
  // --locality: the chosen keys' pages and their reuse over the teacher-forced windows.
  std::optional<LocalityStats> locality;
  DecodeWork window_work;     // decode steps on the ctx-long windows (ppl, error, agree)
  DecodeWork retrieval_work;  // decode steps of passkey and needle questions and answers
  // The policy's method counters (AttentionPolicy::counters: CS recall, Retro budget growth),
  // averaged over the runs (each run is a fresh policy instance): name -> (sum, runs).
  std::map<std::string, std::pair<double, int>> counters;
  void add_counters(const std::map<std::string, double>& c) {
    for (const auto& [k, v] : c) {
      counters[k].first += v;
      counters[k].second += 1;
    }
  }
  // The work that speaks for the policy: the long windows when they ran, else retrieval.
  const DecodeWork& work() const { return window_work.steps ? window_work : retrieval_work; }
};

struct EvalResults {
  EvalOptions options;
  std::string model;
  int head_dim = 0;
  int num_layers = 0;
  int window_prefill = 0;  // tokens prefilled densely before the decoded part of a window
  double seconds = 0;
  std::vector<PolicyResult> policies;  // [0] is dense
};

// A progress line; `result` lines (a needle answer) are kept, the others may be dropped or
// overwritten by the next (a status display).
using ProgressFn = std::function<void(const std::string& line, bool result)>;

// The engine needs max_sequences >= 2 (the prefilled base and one fork) and a context of at
// least ctx + answer_tokens; tasks on text need the model's tokenizer.
// `chat` renders a user turn through the model's chat template (the needle task needs it).
EvalResults run_eval(Engine& engine, const Corpus& corpus, const EvalOptions& options,
                     const ProgressFn& progress = {}, const ChatRender& chat = {});

// Token ids of `count` consecutive tokens of corpus text from a seeded line (BOS first when
// the tokenizer adds one), running into the next documents when needed.
std::vector<int> text_window(const Corpus& corpus, const Tokenizer& tok, size_t count, uint64_t seed);

}  // namespace skim::eval
