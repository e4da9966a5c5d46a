// Arguments of the token log-probabilities, shared by the CUDA kernel and its CPU reference
// (skim::cuda::token_logprobs and skim::cpu::token_logprobs take the same struct): what the
// OpenAI `logprobs` field reports for a sampled token, computed where the logits are.
//
// For each row r of logits [rows][vocab] with top_n[r] >= 0: logprob[r] = logits[r][tokens[r]]
// - log Z, with log Z = max + log sum exp(logit - max), and the top_n[r] largest logits (ties:
// the lower id first) as ids in top_ids and log-probabilities in top_logprobs, both
// [rows][kMaxTopLogprobs]. Rows with top_n < 0 are not written.
#pragma once

#include <cstdint>

namespace skim {

inline constexpr int kMaxTopLogprobs = 20;  // OpenAI's bound on top_logprobs

struct TokenLogprobsArgs {
  int rows = 0, vocab = 0;
  const float* logits = nullptr;
  const int32_t* tokens = nullptr;  // [rows] the chosen token of each row
  const int32_t* top_n = nullptr;   // [rows] alternatives wanted, -1 none, at most kMaxTopLogprobs
  float* logprob = nullptr;         // [rows]
  int32_t* top_ids = nullptr;       // [rows][kMaxTopLogprobs]
  float* top_logprobs = nullptr;    // [rows][kMaxTopLogprobs]
};

}  // namespace skim
