// Engine::generate: the requests go through the scheduler's steps (engine/scheduler.h) on the
// caller's thread, the loop the server runs on its worker: prompts prefill chunk by chunk,
// every live sequence advances one token per decode step until it stops (EOS, a stop string,
// or max_tokens), and a finished request frees its sequence for the next.
#include <optional>

#include "core/error.h"
#include "engine/field_checks.h"
#include "engine/scheduler.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace skim {

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& requests,
                                               const TextCallback& on_text,
                                               const ProgressCallback& on_progress) {
  // Every request is checked before any runs: a bad one fails the call at once.
  std::vector<GenerationRequest> checked = requests;
  for (size_t i = 0; i < checked.size(); ++i) {
    GenerationRequest& rq = checked[i];
    check_request(rq);
    if (rq.prompt_ids.empty()) rq.prompt_ids = tokenizer().encode_prompt(rq.prompt);
    SKIM_REQUIRE(!rq.prompt_ids.empty(), "request {}: empty prompt", i);
  }

  std::vector<GenerationResult> results(checked.size());
  std::optional<std::string> failure;
  SchedulerOptions options;
  options.worker = false;
  Scheduler scheduler(*this, options);
  for (size_t i = 0; i < checked.size(); ++i) {
    RequestCallbacks cb;
    if (on_text)
      cb.on_text = [&on_text, i](std::string_view piece, std::span<const TokenLogprob>) {
        if (!piece.empty()) on_text(i, piece);
      };
    cb.on_done = [&results, i](const GenerationResult& r) { results[i] = r; };
    cb.on_error = [&failure](const std::string& message) {
      if (!failure) failure = message;
    };
    if (on_progress) cb.on_prefill = on_progress;
    scheduler.submit(std::move(checked[i]), "", std::move(cb));
  }
  while (!failure && scheduler.step()) {
  }
  if (failure) throw Error(*failure);  // the scheduler's destructor releases the others' sequences
  return results;
}

}  // namespace skim
