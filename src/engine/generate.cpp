// Engine::generate: prefill each prompt in chunks, then advance all live sequences one token
// per decode step until each stops (EOS, a stop string, or max_tokens).
#include <chrono>
#include <optional>

#include "core/error.h"
#include "engine/field_checks.h"
#include "engine/generation.h"
#include "engine/logprobs.h"
#include "model/config.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace skim {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Live {
  size_t request;
  int seq;
  Generation gen;
  int next_token = -1;  // sampled, not yet fed to the model
  bool done = false;
};

}  // namespace

std::vector<GenerationResult> Engine::generate(const std::vector<GenerationRequest>& requests,
                                               const TextCallback& on_text,
                                               const ProgressCallback& on_progress) {
  const ModelConfig& c = config();
  const Tokenizer& tok = tokenizer();
  const int vocab = c.vocab_size;
  std::vector<GenerationResult> results(requests.size());
  std::vector<Live> live;

  auto emit = [&](Live& s) {
    const std::string piece = s.gen.take_text(s.done);
    if (!piece.empty() && on_text) on_text(s.request, piece);
  };
  auto finish = [&](Live& s) {
    results[s.request].tokens = std::move(s.gen.result().tokens);
    results[s.request].text = std::move(s.gen.result().text);
    results[s.request].stats.finish_reason = s.gen.result().stats.finish_reason;
    results[s.request].logprobs = std::move(s.gen.result().logprobs);
    close_sequence(s.seq);
  };

  // Prefill, one request at a time.
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& rq = requests[i];
    check_request(rq);
    std::vector<int> ids = rq.prompt_ids.empty() ? tok.encode_prompt(rq.prompt) : rq.prompt_ids;
    SKIM_REQUIRE(!ids.empty(), "request {}: empty prompt", i);
    GenerationResult& res = results[i];
    res.stats.prompt_tokens = int(ids.size());
    SKIM_REQUIRE(rq.logprobs < 0 || !on_gpu(), "request {}: logprobs are computed on the CPU path only so far", i);
    int seq = open_sequence();
    double t0 = now_seconds();
    // The last row's logits give the first token; echo_logprobs wants every row's.
    const bool echo = rq.echo_logprobs && rq.logprobs >= 0;
    std::vector<int> rows;
    for (int r = echo ? 0 : int(ids.size()) - 1; r < int(ids.size()); ++r) rows.push_back(r);
    std::vector<float> logits = append(seq, ids, rows, on_progress);
    res.stats.prefill_seconds = now_seconds() - t0;
    if (echo) {
      append_logprobs(logits, size_t(vocab), std::span<const int>(ids).subspan(1), rq.logprobs, res.prompt_logprobs);
      logits.erase(logits.begin(), logits.end() - vocab);
    }
    if (rq.max_tokens == 0) {
      res.stats.finish_reason = "length";
      close_sequence(seq);
      continue;
    }
    Live s{i, seq, Generation(rq, tok, c.eos_token_ids)};
    int token = s.gen.sample(std::span<const float>(logits.data(), size_t(vocab)));
    s.done = s.gen.accept(token);
    s.next_token = token;
    emit(s);
    if (s.done)
      finish(s);
    else
      live.push_back(std::move(s));
  }

  // Decode: every live sequence advances by one token per step.
  const double bytes_before = decode_kv_bytes_read();
  uint64_t seq_steps = 0;
  double t0 = now_seconds(), first_step_s = 0;
  while (!live.empty()) {
    for (Live& s : live)  // the prompt and the generated tokens fill the context: it ends there
      if (at_context_limit(*this, s.seq)) {
        s.gen.result().stats.finish_reason = "length";
        s.done = true;
        finish(s);
      }
    std::erase_if(live, [](const Live& s) { return s.done; });
    if (live.empty()) break;
    std::vector<int> seqs, tokens;
    std::vector<Generation*> gens;
    for (Live& s : live) {
      seqs.push_back(s.seq);
      tokens.push_back(s.next_token);
      gens.push_back(&s.gen);
    }
    const std::vector<int> next = decode_step(*this, seqs, tokens, gens);
    if (seq_steps == 0) first_step_s = now_seconds() - t0;
    seq_steps += live.size();
    for (size_t j = 0; j < live.size(); ++j) {
      Live& s = live[j];
      s.done = s.gen.accept(next[j]);
      s.next_token = next[j];
      emit(s);
      if (s.done) finish(s);
    }
    std::erase_if(live, [](const Live& s) { return s.done; });
  }
  double decode_s = now_seconds() - t0;
  const double bytes = decode_kv_bytes_read() - bytes_before;
  double bytes_per_step = seq_steps ? bytes / double(seq_steps) : 0;
  for (GenerationResult& r : results) {
    r.stats.generated_tokens = int(r.tokens.size());
    r.stats.decode_seconds = decode_s;
    r.stats.first_step_seconds = first_step_s;
    r.stats.kv_bytes_per_step = bytes_per_step;
  }
  return results;
}

}  // namespace skim
