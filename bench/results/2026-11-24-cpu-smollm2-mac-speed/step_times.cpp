// Times each decode step of one greedy generation: the first step (where main's mac resolved
// its prefill ring states) apart from the steady ones, so the steady cost is a median over
// steps, robust to other jobs on the machine, and one prefill serves both. Built by run.sh
// against a skim build's libraries (main's or this branch's: the API used is the same).
//
// step_times MODEL PROMPT_FILE POLICY THREADS STEPS -> one JSON line
// POLICY "A->B": prefill under A, then Engine::set_policy(B) (timed: switch_s), decode under B.
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "attention/policy.h"
#include "skim/engine.h"
#include "tokenizer/tokenizer.h"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds of all the process's threads: unlike wall time, blind to the time other jobs
// hold the cores (though not to their use of memory bandwidth and caches).
double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

int argmax(const std::vector<float>& logits) {
  return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: step_times MODEL PROMPT_FILE POLICY THREADS STEPS\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  std::stringstream text;
  text << in.rdbuf();
  const std::string spec = argv[3];
  const size_t arrow = spec.find("->");
  skim::EngineOptions o;
  o.model_dir = argv[1];
  o.policy = spec.substr(0, arrow);
  o.threads = std::stoi(argv[4]);
  const int steps = std::stoi(argv[5]);
  skim::Engine engine(o);
  const std::vector<int> prompt = engine.tokenizer().encode_prompt(text.str());
  const int seq = engine.open_sequence();
  const int last = int(prompt.size()) - 1;
  double t = now();
  int token = argmax(engine.append(seq, prompt, {&last, 1}));
  const double prefill = now() - t;
  double switch_s = 0;
  if (arrow != std::string::npos) {
    t = now();
    engine.set_policy(spec.substr(arrow + 2));
    switch_s = now() - t;
  }
  const double bytes_before = engine.decode_kv_bytes_read();
  std::string ms, cpu_ms;
  for (int s = 0; s < steps; ++s) {
    t = now();
    const double c = cpu_now();
    token = argmax(engine.decode({&seq, 1}, {&token, 1}));
    ms += (s ? "," : "") + std::to_string((now() - t) * 1e3);
    cpu_ms += (s ? "," : "") + std::to_string((cpu_now() - c) * 1e3);
  }
  const double bytes = (engine.decode_kv_bytes_read() - bytes_before) / steps;
  std::string counters;
  for (const auto& [k, v] : engine.policy().counters())
    if (k.find(".L") == std::string::npos) counters += ",\"" + k + "\":" + std::to_string(v);
  std::printf("{\"policy\":\"%s\",\"threads\":%d,\"prompt_tokens\":%zu,\"prefill_s\":%.3f,\"switch_s\":%.3f,"
              "\"kv_bytes_per_step\":%.6g,\"step_ms\":[%s],\"step_cpu_ms\":[%s]%s}\n",
              spec.c_str(), o.threads, prompt.size(), prefill, switch_s, bytes, ms.c_str(), cpu_ms.c_str(), counters.c_str());
  return 0;
}
