#include "eval/eval_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <random>

#include "attention/policy.h"
#include "core/error.h"
#include "engine/sampler.h"
#include "model/config.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace skim::eval {

namespace {

// A seed for one item of one task, so adding a length or a policy does not move the others.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0, uint64_t c = 0) {
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(a), uint32_t(b), uint32_t(c)};
  std::mt19937_64 rng(seq);
  return rng();
}

// Sequence opened on construction, closed on scope exit, even when a step throws.
struct ScopedSequence {
  Engine& engine;
  int id;
  ScopedSequence(Engine& e, int seq) : engine(e), id(seq) {}
  ~ScopedSequence() { engine.close_sequence(id); }
};

class Runner {
 public:
  Runner(Engine& engine, const Corpus& corpus, const EvalOptions& o, const ProgressFn& progress, const ChatRender* chat)
      : engine_(engine), corpus_(corpus), o_(o), progress_(progress), chat_(chat) {}

  EvalResults run() {
    double t0 = now_seconds();
    EvalResults r;
    r.options = o_;
    r.head_dim = engine_.config().head_dim;
    r.num_layers = engine_.config().num_layers;
    for (const std::string& p : o_.policies) {
      PolicyResult pr;
      pr.policy = p;
      if (o_.has("ppl")) pr.nll.emplace(o_.buckets);
      if (o_.has("error")) pr.error.emplace(r.num_layers);
      if (o_.has("agree")) pr.agreement.emplace();
      r.policies.push_back(std::move(pr));
    }
    results_ = &r.policies;
    if (o_.runs_windows()) {
      for (int d = 0; d < o_.docs; ++d) r.window_prefill = run_window(d);
    }
    if (o_.has("passkey")) {
      for (int keys : o_.keys)
        for (int length : o_.lengths)
          for (int i = 0; i < o_.prompts; ++i) run_passkey(keys, length, i);
    }
    if (o_.has("needle")) {
      SKIM_REQUIRE(chat_ != nullptr, "the needle task asks through the model's chat template, and {} has none",
                   "this model");
      for (size_t k = 0; k < o_.needles.size(); ++k)
        for (int length : o_.lengths)
          for (int i = 0; i < o_.prompts; ++i) run_needle(int(k), length, i);
    }
    engine_.set_policy("dense");
    r.seconds = now_seconds() - t0;
    return r;
  }

 private:
  void say(const std::string& line, bool result = false) {
    if (progress_) progress_(line, result);
  }

  // Progress of a decode loop, at most every 64 steps.
  StepCallback step_progress(const std::string& what) {
    if (!progress_) return {};
    return [this, what](int done, int total) {
      if (done % 64 == 0 || done == total) say(fmt::format("{} {}/{}", what, done, total));
    };
  }

  // One text window: prefill densely, then per policy a teacher-forced decode (ppl, error)
  // and a greedy generation (agree), each on its own fork of the prefilled base.
  int run_window(int doc) {
    const int m = (o_.has("ppl") || o_.has("error")) ? o_.decode_tokens : 0;
    const int g = o_.has("agree") ? o_.agree_tokens : 0;
    const int prefill = o_.ctx - std::max(m, g);
    std::vector<int> window = text_window(corpus_, engine_.tokenizer(), size_t(o_.ctx) + 1, mix_seed(o_.seed, 1, uint64_t(doc)));
    const std::string where = fmt::format("window {}/{}", doc + 1, o_.docs);

    engine_.set_policy("dense");
    ScopedSequence base(engine_, engine_.open_sequence());
    ProgressCallback on_prefill;
    if (progress_)
      on_prefill = [&](int done, int total) { say(fmt::format("{}: dense prefill {}/{}", where, done, total)); };
    engine_.append(base.id, std::span<const int>(window.data(), size_t(prefill)), {}, on_prefill);

    std::vector<int> reference;  // dense's greedy tokens
    for (PolicyResult& pr : *results_) {
      if (m > 0) {
        engine_.set_policy(pr.policy);
        OutputErrorMeter errors(engine_.config().num_layers);
        if (pr.error) errors.attach(engine_.policy());
        SelectionLocalityMeter locality;
        if (o_.locality) locality.attach(engine_.policy());
        ScopedSequence fork(engine_, engine_.fork_sequence(base.id));
        std::span<const int> all(window);
        TeacherForcedRun run = teacher_forced_decode(
            engine_, fork.id, all.subspan(size_t(prefill), size_t(m)), all.subspan(size_t(prefill) + 1, size_t(m)),
            [&errors] { return errors.seconds(); },
            step_progress(fmt::format("{}: {} teacher-forced", where, pr.policy)));
        engine_.policy().set_observer({});
        SelectionLocalityMeter::detach(engine_.policy());
        if (o_.locality) {
          if (!pr.locality) pr.locality.emplace();
          pr.locality->merge(locality.stats());
        }
        pr.add_counters(engine_.policy().counters());
        if (pr.nll) pr.nll->add(run.nll);
        if (pr.error) pr.error->merge(errors);
        pr.window_work.add(run.work);
      }
      if (g > 0) {
        engine_.set_policy(pr.policy);
        ScopedSequence fork(engine_, engine_.fork_sequence(base.id));
        GreedyRun run = greedy_decode(engine_, fork.id, window[size_t(prefill)], g,
                                      step_progress(fmt::format("{}: {} greedy", where, pr.policy)));
        if (reference.empty()) reference = run.tokens;  // dense runs first
        pr.agreement->add(reference, run.tokens);
        pr.window_work.add(run.work);
      }
    }
    return prefill;
  }

  // One passkey prompt: the haystack and definition lines prefilled densely; per policy the
  // question line is fed as decode steps and the answer generated greedily, so the policy,
  // not the dense prefill, does the retrieval.
  void run_passkey(int keys, int length, int index) {
    const Tokenizer& tok = engine_.tokenizer();
    PasskeyCase c;
    c.keys = keys;
    c.depth = o_.depths[size_t(index) % o_.depths.size()];
    c.seed = mix_seed(o_.seed, 2, uint64_t(keys) << 32 | uint64_t(length), uint64_t(index));
    TokenizedPasskey t = tokenize_passkey(corpus_, c, size_t(length), tok);
    const std::string where = fmt::format("passkey {} key{} {} tokens, prompt {}/{}", keys, keys > 1 ? "s" : "",
                                          length, index + 1, o_.prompts);

    engine_.set_policy("dense");
    ScopedSequence base(engine_, engine_.open_sequence());
    const size_t from = policy_reads_from(t.ids.size(), t.question_start);
    prefill(base.id, std::span<const int>(t.ids.data(), from), where);

    for (PolicyResult& pr : *results_) {
      const std::string text = answer_under_policy(pr, base.id, t.ids, from, o_.answer_tokens, where,
                                                   [&](const std::string& a, int) { return a.size() >= t.prompt.answer.size(); });
      pr.retrieval.add(keys, length, c.depth, answer_matches(text, t.prompt.answer));
    }
  }

  // One needle prompt (eval/needle.h): the rendered chat up to the question prefilled densely;
  // per policy the question and the template's tail decoded, the answer generated greedily
  // until EOS or needle_tokens.
  void run_needle(int kind, int length, int index) {
    NeedleCase c;
    c.kind = o_.needles[size_t(kind)];
    c.depth = o_.depths[size_t(index) % o_.depths.size()];
    c.seed = mix_seed(o_.seed, 3, uint64_t(kind) << 32 | uint64_t(length), uint64_t(index));
    TokenizedNeedle t = tokenize_needle(corpus_, c, size_t(length), engine_.tokenizer(), *chat_);
    const std::string where = fmt::format("needle {} {} tokens, prompt {}/{}", c.kind, length, index + 1, o_.prompts);
    engine_.set_policy("dense");
    ScopedSequence base(engine_, engine_.open_sequence());
    const size_t from = policy_reads_from(t.ids.size(), t.question_start);
    prefill(base.id, std::span<const int>(t.ids.data(), from), where);
    const std::vector<int>& eos = engine_.config().eos_token_ids;
    const TokenSpan needle{int(t.needle_begin), int(t.needle_end)};
    for (PolicyResult& pr : *results_) {
      std::optional<NeedleCoverageMeter> coverage;
      if (o_.coverage) coverage.emplace();
      const std::string text = answer_under_policy(
          pr, base.id, t.ids, from, o_.needle_tokens, where,
          [&](const std::string&, int token) { return std::find(eos.begin(), eos.end(), token) != eos.end(); },
          coverage ? &*coverage : nullptr, needle);
      const bool found = needle_found(text, c.kind, t.prompt.value);
      std::string shown;  // one line
      for (char ch : text) shown += ch == '\n' ? std::string("\\n") : std::string(1, ch);
      say(fmt::format("{}: {} answered \"{}\" ({} \"{}\")", where, pr.policy, shown, found ? "found" : "missed",
                      t.prompt.value),
          true);
      pr.needle.add(kind, length, c.depth, found);
      if (coverage) {
        std::optional<NeedleCoverageMeter>& into = found ? pr.coverage_found : pr.coverage_lost;
        if (!into) into.emplace();
        into->merge(*coverage);
      }
    }
  }

  // The first prompt token decoded under the policy (EvalOptions::question_dense).
  size_t policy_reads_from(size_t prompt_tokens, size_t question_start) const {
    return o_.question_dense ? prompt_tokens - 1 : question_start;
  }

  void prefill(int seq, std::span<const int> ids, const std::string& where) {
    ProgressCallback on_prefill;
    if (progress_)
      on_prefill = [&](int done, int total) { say(fmt::format("{}: dense prefill {}/{}", where, done, total)); };
    engine_.append(seq, ids, {}, on_prefill);
  }

  // On a fork of the prefilled `base`, under the policy: ids[from..] fed as decode steps (so
  // the policy, not the dense prefill, reads the question), then greedy tokens until
  // `done(text, token)` or `max_tokens`. Returns the answer's text; records work and counters.
  // `coverage`, when given, observes the steps whose logits make the answer (the last prompt
  // token's and the answer's own) for the needle at `needle`.
  std::string answer_under_policy(PolicyResult& pr, int base, const std::vector<int>& ids, size_t from, int max_tokens,
                                  const std::string& where, const std::function<bool(const std::string&, int)>& done,
                                  NeedleCoverageMeter* coverage = nullptr, TokenSpan needle = {}) {
    say(fmt::format("{}: {}", where, pr.policy));
    engine_.set_policy(pr.policy);
    ScopedSequence fork(engine_, engine_.fork_sequence(base));
    DecodeWorkMeter meter(engine_, fork.id);
    std::vector<float> logits;
    for (size_t i = from; i < ids.size(); ++i) {
      if (coverage && i + 1 == ids.size()) coverage->attach(engine_.policy(), needle);
      logits = engine_.decode(std::span<const int>(&fork.id, 1), std::span<const int>(&ids[i], 1));
      meter.step_done();
    }
    std::vector<int> answer;
    std::string text;
    while (true) {
      answer.push_back(argmax(logits));
      text = engine_.tokenizer().decode(answer);
      if (done(text, answer.back()) || int(answer.size()) >= max_tokens) break;
      logits = engine_.decode(std::span<const int>(&fork.id, 1), std::span<const int>(&answer.back(), 1));
      meter.step_done();
    }
    if (coverage) NeedleCoverageMeter::detach(engine_.policy());
    pr.retrieval_work.add(meter.finish());
    pr.add_counters(engine_.policy().counters());
    return text;
  }

  Engine& engine_;
  const Corpus& corpus_;
  const EvalOptions& o_;
  const ProgressFn& progress_;
  const ChatRender* chat_;  // null: the model has no chat template
  std::vector<PolicyResult>* results_ = nullptr;
};

}  // namespace

std::vector<int> text_window(const Corpus& corpus, const Tokenizer& tok, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t docs = corpus.documents.size();
  size_t doc = rng() % docs;
  const std::string& first = corpus.documents[doc].text;
  // Start at a line boundary so the window begins the way documents do.
  size_t start = rng() % first.size();
  start = first.rfind('\n', start);
  start = start == std::string::npos ? 0 : start + 1;
  std::vector<int> ids = tok.encode_prompt("");
  const size_t bos = ids.size();
  size_t chars = count * 5;  // code runs about 3 to 4 bytes per token
  while (true) {
    std::string text;
    size_t d = doc, at = start;
    const size_t limit = std::min(chars, corpus.total_bytes());
    while (text.size() < limit) {
      const std::string& s = corpus.documents[d].text;
      size_t take = std::min(limit - text.size(), s.size() - at);
      text.append(s, at, take);
      at += take;
      if (at == s.size()) {
        d = (d + 1) % docs;
        at = 0;
      }
    }
    std::vector<int> body = tok.encode(text, false);
    if (body.size() + bos >= count) {
      ids.insert(ids.end(), body.begin(), body.begin() + long(count - bos));
      return ids;
    }
    SKIM_REQUIRE(limit < corpus.total_bytes(), "--data: {} tokens of text needed, the data has only {}", count,
                 body.size() + bos);
    chars = chars * 3 / 2;
  }
}

EvalResults run_eval(Engine& engine, const Corpus& corpus, const EvalOptions& options, const ProgressFn& progress,
                     const ChatRender& chat) {
  validate(options);
  return Runner(engine, corpus, options, progress, chat ? &chat : nullptr).run();
}

}  // namespace skim::eval
