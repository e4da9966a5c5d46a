// What decoding has cost so far, in skim's public API: the bytes attention read and the
// attention policy's own counters (MAC hits, ART blocks visited, CS recall, ...).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace skim {

struct PolicyStats {
  // K/V bytes decode steps read, with the policy's metadata (page digests, CS tables, MAC
  // rings), all layers, summed since the engine started.
  double decode_kv_bytes_read = 0;
  uint64_t rectified_tokens = 0;  // tokens ReSA's rectification re-encoded
  uint64_t rectification_passes = 0;  // forward passes it ran (sequences rectified together share them)
  // The policy's counters by name (docs/policies.md lists each method's); on the GPU, whose
  // kernels keep none yet, the backend's (KV beyond GPU memory: host_kv.pages_copied,
  // host_kv.page_hits, host_kv.pages_copied_ahead; pieces of one KV head's page, K and V).
  std::map<std::string, double> counters;
};

}  // namespace skim
