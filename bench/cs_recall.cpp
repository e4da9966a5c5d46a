// cs_recall: how much of the true top-K CSAttention's selection covers on a real model, per
// layer, for many `cs` configurations from one dense pass (issue 14, bench/results/
// 2026-11-24-cpu-cs-recall/).
//
// One dense forward over a prompt and its continuation records every layer's post-RoPE queries
// and keys. Each configuration then replays them through the selector itself (CsSelector, the
// code `--policy cs` runs): the prompt rows as a prefill (the tables are built from their
// queries), then decode rows one at a time (streamed into the lists, then selected). Recall is
// the selector's own counter (`recall=1`): the fraction of the K = keep x context keys with the
// largest q.k that the selection covers, and of those the candidates cover (the gathered lists'
// keys and the window, before the top-K cut). A decode row's query is what a teacher-forced
// dense decode computes there, so the replay sees the queries `skim eval` would.
//
//   cs_recall -m MODEL --text FILE --prompt-tokens 4032 --decode 32 --configs 'cs;cs:score=dot'
//   cs_recall -m MODEL --needle number --needle-tokens 4096 --data data/heldout-python --configs ...
//   --offsets 0,1024: decode rows measured at prompt + offset (later keys still streamed in)
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/attend.h"
#include "attention/csattn.h"
#include "attention/policy.h"
#include "core/error.h"
#include "eval/corpus.h"
#include "eval/needle.h"
#include "kv/paged_kv_cache.h"
#include "model/config.h"
#include "skim/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU time of the process, all threads: on a shared machine, what the work cost apart from
// waiting for a core.
double cpu_s() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Every layer's post-RoPE queries and keys by position, from the batches a dense pass attends.
struct Recording {
  int layers = 0, heads = 0, kv_heads = 0, d = 0, length = 0;
  std::vector<std::vector<float>> q, k;  // per layer: [pos][heads][d], [pos][kv_heads][d]

  explicit Recording(const ModelConfig& c)
      : layers(c.num_layers),
        heads(c.num_heads),
        kv_heads(c.num_kv_heads),
        d(c.head_dim),
        q(size_t(layers)),
        k(size_t(layers)) {}

  void add(const AttentionBatch& b) {
    for (int r = 0; r < b.num_rows; ++r) {
      const int pos = b.positions[r];
      length = std::max(length, pos + 1);
      auto& q_l = q[size_t(b.layer)];
      auto& k_l = k[size_t(b.layer)];
      q_l.resize(size_t(length) * heads * d);
      k_l.resize(size_t(length) * kv_heads * d);
      std::copy_n(b.q + size_t(r) * heads * d, size_t(heads) * d, q_l.data() + size_t(pos) * heads * d);
      for (int h = 0; h < kv_heads; ++h) {
        SeqKV kv{b.kv, b.tables[r]->pages.data(), h};
        std::copy_n(kv.key(pos), d, k_l.data() + (size_t(pos) * kv_heads + h) * d);
      }
    }
  }
};

// The recorded keys in a cache of their own, and batches of recorded rows over it.
struct Replay {
  const Recording& rec;
  PagedKVCache cache;
  PageTable table;
  std::vector<int32_t> positions;
  std::vector<const PageTable*> tables;

  explicit Replay(const Recording& r)
      : rec(r), cache(KVCacheShape{r.layers, r.kv_heads, r.d, kDefaultPageSize, r.length / kDefaultPageSize + 2}) {
    cache.reserve(table, r.length);
    std::vector<float> zero(size_t(r.kv_heads) * r.d, 0.0f);  // values: recall never reads them
    for (int l = 0; l < r.layers; ++l)
      for (int pos = 0; pos < r.length; ++pos)
        cache.write(l, table, pos, r.k[size_t(l)].data() + size_t(pos) * r.kv_heads * r.d, zero.data());
    table.length = r.length;
  }

  AttentionBatch rows(int layer, int first, int n, bool decode) {
    positions.resize(size_t(n));
    for (int i = 0; i < n; ++i) positions[size_t(i)] = first + i;
    tables.assign(size_t(n), &table);
    AttentionBatch b;
    b.layer = layer;
    b.num_rows = n;
    b.num_heads = rec.heads;
    b.num_kv_heads = rec.kv_heads;
    b.head_dim = rec.d;
    b.scale = 1.0f / std::sqrt(float(rec.d));
    b.decode = decode;
    b.kv = cache.layer(layer);
    b.positions = positions.data();
    b.tables = tables.data();
    b.q = rec.q[size_t(layer)].data() + size_t(first) * rec.heads * rec.d;
    return b;
  }
};

struct Result {
  std::string spec;
  std::map<std::string, double> counters;
  double build_s = 0, build_cpu_s = 0;  // the first decode row of every layer: the tables' build
  double keys_read = 0, context = 0;    // distinct keys the group's heads read, and dense's, summed
  double metadata_bytes = 0;            // centroids and list entries read, summed over selections
  int selections = 0;
};

// Keys a selection reads once for all heads of the group (what a GQA kernel loads).
int distinct_keys(const Selection& sel) {
  std::vector<KeyRange> all;
  for (const auto& h : sel.heads) all.insert(all.end(), h.begin(), h.end());
  int n = 0;
  for (KeyRange r : coalesce_ranges(std::move(all))) n += r.end - r.begin;
  return n;
}

// One configuration at one offset: the prompt [0, prompt) as a prefill, the rows up to
// prompt + offset streamed in as decode rows without a selection, then `decode` rows
// selected. The tables are built at the first decode row, as in the engine.
Result run_config(Replay& replay, const std::string& spec, int prompt, int decode, int offset, double recall_keep) {
  PolicySpec parsed = parse_policy_spec(spec);
  SKIM_REQUIRE(parsed.parts.size() == 1 && parsed.parts[0].name == "cs", "--configs: '{}' is not a cs policy", spec);
  CsParams p = cs_params(parsed.parts[0]);
  p.recall = true;
  p.recall_keep = recall_keep;
  CsSelector cs(p);
  Result res;
  res.spec = spec;
  const int first = prompt + offset, end = std::min(replay.rec.length, first + decode);
  SKIM_REQUIRE(first < end, "offset {}: no recorded rows there", offset);
  for (int l = p.dense_layers; l < replay.rec.layers; ++l) {
    cs.observe(replay.rows(l, 0, prompt, false));
    for (int row = prompt; row < end;) {
      const int n = row < first ? first - row : 1;  // rows before the offset in one batch
      const double t0 = now_s(), c0 = cpu_s();
      AttentionBatch b = replay.rows(l, row, n, true);
      cs.observe(b);
      if (row == prompt) res.build_s += now_s() - t0, res.build_cpu_s += cpu_s() - c0;  // it built the tables
      row += n;
      if (row <= first) continue;
      Selection sel;
      for (int h = 0; h < replay.rec.kv_heads; ++h) {
        sel.heads.clear();
        sel.metadata_bytes = 0;
        cs.select(SelectInput{b, 0, h, row}, sel);
        res.keys_read += distinct_keys(sel);
        res.context += row;
        res.metadata_bytes += double(sel.metadata_bytes);
        res.selections += 1;
      }
    }
    cs.forget(&replay.table);  // this layer's tables are done: keep memory to one layer's
  }
  res.counters = cs.counters();
  return res;
}

}  // namespace

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep))
    if (!item.empty()) out.push_back(item);
  return out;
}

namespace {

struct Args {
  EngineOptions engine;
  std::string text, needle, data = "data/heldout-python", configs = "cs", offsets = "0", json;
  double recall_keep = 0;
  int prompt_tokens = 4032, decode = 32, needle_tokens = 4096, answer_tokens = 32;
  double depth = 0.5;
  uint64_t seed = 1;
};

// The token rows to record and where the prompt ends: a text's first tokens, or a needle
// prompt (the haystack up to the question is the prompt; the question, the template's tail and
// dense's greedy answer are decode rows, as `skim eval --tasks needle` feeds them).
std::vector<int> needle_ids(Engine& e, const Args& a, int& prompt) {
  eval::Corpus corpus = eval::load_corpus({a.data});
  std::optional<ChatTemplate> t = ChatTemplate::from_model_dir(a.engine.model_dir);
  SKIM_REQUIRE(t.has_value(), "--needle needs a model with a chat template");
  eval::ChatRender chat = [&](const std::string& user) {
    ChatTemplateInputs in;
    in.messages.push_back({{"role", "user"}, {"content", user}});
    return t->render(in);
  };
  eval::NeedleCase c;
  c.kind = a.needle;
  c.depth = a.depth;
  c.seed = a.seed;
  eval::TokenizedNeedle tn = eval::tokenize_needle(corpus, c, size_t(a.needle_tokens), e.tokenizer(), chat);
  prompt = int(tn.question_start);
  std::cerr << fmt::format("needle {} at depth {:.2f}: value {}, prompt {} tokens, question+tail {}\n", c.kind,
                           tn.prompt.depth, tn.prompt.value, prompt, tn.ids.size() - tn.question_start);
  return tn.ids;
}

int run(const Args& a) {
  Engine e(a.engine);
  const ModelConfig& c = e.config();
  Recording rec(c);
  e.policy().set_observer([&](const AttentionBatch& b) { rec.add(b); });

  int prompt = a.prompt_tokens;
  std::vector<int> ids;
  const std::vector<int> offsets = [&] {
    std::vector<int> o;
    for (const std::string& x : split(a.offsets, ',')) o.push_back(std::stoi(x));
    return o;
  }();
  int seq = e.open_sequence();
  double t0 = now_s();
  if (!a.needle.empty()) {
    ids = needle_ids(e, a, prompt);
    std::vector<float> logits = e.append(seq, ids, std::vector<int>{int(ids.size()) - 1});
    const auto& eos = c.eos_token_ids;
    std::vector<int> answer;
    for (int i = 0; i < a.answer_tokens; ++i) {  // dense's greedy answer, recorded as decode rows
      const int tok = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
      answer.push_back(tok);
      if (std::find(eos.begin(), eos.end(), tok) != eos.end()) break;
      logits = e.decode(std::span<const int>(&seq, 1), std::span<const int>(&tok, 1));
    }
    std::cerr << "dense answer: " << e.tokenizer().decode(answer) << "\n";
  } else {
    std::ifstream f(a.text);
    SKIM_REQUIRE(f.good(), "--text {}: cannot read", a.text);
    std::stringstream ss;
    ss << f.rdbuf();
    ids = e.tokenizer().encode_prompt(ss.str());
    const size_t want = size_t(prompt) + size_t(*std::max_element(offsets.begin(), offsets.end())) + size_t(a.decode);
    SKIM_REQUIRE(ids.size() >= want, "--text {}: {} tokens, {} wanted", a.text, ids.size(), want);
    ids.resize(want);
    e.append(seq, ids, {});
  }
  const double record_s = now_s() - t0;
  std::cerr << fmt::format("recorded {} rows x {} layers in {:.1f} s (prompt {})\n", rec.length, rec.layers, record_s,
                           prompt);

  Replay replay(rec);
  nlohmann::json out = {{"model", a.engine.model_dir.string()},
                        {"prompt", prompt},
                        {"rows", rec.length},
                        {"decode", a.decode},
                        {"offsets", offsets},
                        {"record_seconds", record_s},
                        {"threads", a.engine.threads},
                        {"configs", nlohmann::json::array()}};
  std::cout << "| config | offset | recall | ceiling | candidate recall | union keys | centroid cos | KV read | "
               "table KB read | bytes read | build s (cpu s) | recall per layer |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& spec : split(a.configs, ';'))
    for (int offset : offsets) {
      Result r = run_config(replay, spec, prompt, a.decode, offset, a.recall_keep);
      const double kv_read = r.keys_read / r.context;
      const double meta_kb = r.metadata_bytes / r.selections / 1e3;
      // What skim counts as read per step, against dense: K and V rows (fp32 on the CPU) plus the
      // centroids and list entries the searches read.
      const double row_bytes = 2.0 * rec.d * sizeof(float);
      const double bytes_read = (r.keys_read * row_bytes + r.metadata_bytes) / (r.context * row_bytes);
      std::string per_layer;
      nlohmann::json layers = nlohmann::json::array();
      for (int l = 0; l < rec.layers; ++l) {
        auto it = r.counters.find(fmt::format("cs_recall.L{}", l));
        auto jt = r.counters.find(fmt::format("cs_candidate_recall.L{}", l));
        per_layer += it == r.counters.end() ? " -" : fmt::format(" {:.2f}", it->second);
        layers.push_back(
            {{"layer", l},
             {"recall", it == r.counters.end() ? nlohmann::json() : nlohmann::json(it->second)},
             {"candidate_recall", jt == r.counters.end() ? nlohmann::json() : nlohmann::json(jt->second)}});
      }
      std::cout << fmt::format(
                       "| `{}` | {} | {:.3f} | {:.3f} | {:.3f} | {:.0f} | {:.3f} | {:.3f} | {:.1f} | {:.3f} | {:.2f} "
                       "({:.2f}) |{} |\n",
                       spec, offset, r.counters["cs_recall"], r.counters["cs_recall_ceiling"],
                       r.counters["cs_candidate_recall"], r.counters["cs_union_keys"], r.counters["cs_centroid_cos"],
                       kv_read, meta_kb, bytes_read, r.build_s, r.build_cpu_s, per_layer)
                << std::flush;
      out["configs"].push_back({{"spec", spec},
                                {"offset", offset},
                                {"counters", r.counters},
                                {"build_seconds", r.build_s},
                                {"build_cpu_seconds", r.build_cpu_s},
                                {"kv_read", kv_read},
                                {"table_kb_per_selection", meta_kb},
                                {"bytes_read", bytes_read},
                                {"layers", layers}});
    }
  if (!a.json.empty()) std::ofstream(a.json) << out.dump(1) << "\n";
  return 0;
}

}  // namespace
}  // namespace skim

int main(int argc, char** argv) {
  skim::Args a;
  CLI::App app{"CSAttention's top-K recall per layer on a real model, many configurations from one dense pass"};
  app.add_option("-m,--model", a.engine.model_dir, "model directory")->required();
  app.add_option("-t,--threads", a.engine.threads, "threads (0: all cores)");
  app.add_option("--text", a.text, "held-out text: its first tokens are the prompt and the decode rows");
  app.add_option("--prompt-tokens", a.prompt_tokens, "prompt length with --text")->capture_default_str();
  app.add_option("--decode", a.decode, "decode rows measured per offset")->capture_default_str();
  app.add_option("--offsets", a.offsets, "decode rows measured at prompt + each offset (comma list)")
      ->capture_default_str();
  app.add_option("--needle", a.needle, "a needle prompt of this kind (number, word, code) instead of --text");
  app.add_option("--needle-tokens", a.needle_tokens, "needle prompt length")->capture_default_str();
  app.add_option("--depth", a.depth, "needle depth")->capture_default_str();
  app.add_option("--seed", a.seed, "needle haystack and value")->capture_default_str();
  app.add_option("--data", a.data, "haystack text for --needle")->capture_default_str();
  app.add_option("--configs", a.configs, "cs policy strings separated by ';'")->capture_default_str();
  app.add_option("--recall-keep", a.recall_keep,
                 "recall of the true top (this x context) keys whatever each config's keep (0: its keep)");
  app.add_option("--json", a.json, "write the results here");
  CLI11_PARSE(app, argc, argv);
  try {
    int max_offset = 0;
    for (const std::string& x : skim::split(a.offsets, ',')) max_offset = std::max(max_offset, std::stoi(x));
    a.engine.max_context = std::max(a.prompt_tokens + max_offset + a.decode, a.needle_tokens + a.answer_tokens) + 16;
    return skim::run(a);
  } catch (const std::exception& e) {
    std::cerr << "cs_recall: " << e.what() << "\n";
    return 1;
  }
}
