// ART, adaptive reading of the KV cache (seeds/003; DESIGN.md sections 2, 3, 9, 10): the
// traversal stage. One query head visits its keys block by block (64 tokens) in a priority
// order, keeping the running attention state; after each block it compares the running
// normalised output with the one before: the block is stable when the relative change of the
// norm is below eps_scale and 1 - cos is below eps_dir; after `patience` consecutive stable
// blocks the traversal stops and the rest is never read.
//
// The test runs on the full output vector; the same test on a 32-element strided probe (what
// the GPU kernel sees: one element per lane of warp 0) runs alongside and only its
// disagreement is counted.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/cpu/attend.h"
#include "attention/method_defaults.h"

namespace skim {

enum class ArtOrder {
  Given,      // the selector's priority order (quest, gbsa/resa, cs): descending score
  Recent,     // most recent block first (the paper's; dense, MAC's band+tail)
  Bound,      // descending Quest page bound of the query head (dense)
  GroupBound, // descending page bound of the GQA group's mean query (dense): one order per KV
              // head, so a GPU kernel reads each page once for the group (as gbsa ranks)
  Streaming,  // the recent window most-recent-first, its sinks always read first
};

struct ArtParams {
  double eps_scale = kArtEpsScale;  // method_defaults.h says why
  double eps_dir = kArtEpsDir;
  int patience = kArtPatience;
  int block = 64;   // tokens per block (4 pages)
  int probe = 32;   // elements of the strided probe
  // Blocks per stability test: the state is tested after every `round` blocks against the
  // state of the previous test, and `patience` counts consecutive stable tests. 1 is the
  // paper's test per block; a GPU kernel spreads a round's blocks over its CTAs and tests
  // between rounds (DESIGN.md section 9), which this reproduces. art_params makes the group
  // rule's defaults kArtGroupRound and kArtGroupPatience (method_defaults.h).
  int round = 1;
  // The GPU kernel's rule (cuda::art_decode_attention; attention/art_decode_args.h): the heads
  // of a GQA group that share one order stop together, once every one of them has been stable
  // `patience` times in a row (group_stop); the test runs on the kernel's 32-element probe
  // (probe_test, art_probe_dim) instead of the full vector; and `lag` more rounds are read past
  // the stopping round (a wave of the kernel's warps). The default wherever the group's heads
  // share one order (art_params); probe_test matters with group_stop only.
  bool group_stop = true;
  bool probe_test = true;
  int lag = 0;
  int warps = 0;  // GPU only: the kernel's warps per list (0: the decode kernel's split)
  // art:order for a dense base. By bound, not the paper's recent-first: on SmolLM2 recent-first
  // never stabilises (99% of blocks visited at 4K), bound order visits 59% at dense quality and
  // the demo model 20% (docs/results.md "Defaults"); the group's bound (GroupBound), so that
  // the group's heads share one order and the GPU kernel's rule applies.
  ArtOrder dense_order = ArtOrder::GroupBound;
};

struct PolicyPart;

// art's keys of a policy string, resolved and checked: the CPU policy (policy_factory.cpp) and
// the GPU planner (backend/cuda/decode_planner.cpp) read them through this one parser.
// `selector` is the base's part (null or dense: a dense base); `with_mac`: mac reuses before it.
// stop defaults to group wherever the group's heads share one order (a dense base in
// order=group, gbsa, resa, streaming, quest; not with mac, whose hits give a head an order of
// its own), and to head elsewhere (cs, oracle, mac, order=bound or recent). With mac,
// stop=group runs ART over MAC's part below each row's prefix end only (pipeline_mac.cpp).
ArtParams art_params(const std::string& policy, const PolicyPart& art, const PolicyPart* selector, bool with_mac);

// Blocks of keys in visiting order; a block is up to `block` tokens, possibly from several
// ranges (Quest's pages of one block need not be adjacent).
struct ArtPlan {
  std::vector<KeyRange> pinned;                // always read first, before any test (sinks)
  std::vector<std::vector<KeyRange>> blocks;
};

// Cuts priority-ordered ranges into consecutive blocks of `block` tokens.
void art_blocks_in_order(const std::vector<KeyRange>& ranges, int block, ArtPlan& plan);
// Cuts one range into blocks of `block` tokens from its end backwards: most recent first.
void art_blocks_recent(KeyRange range, int block, ArtPlan& plan);

struct ArtResult {
  int blocks = 0, visited = 0;  // blocks in the plan (pinned not counted), blocks read
  bool stopped = false;         // stopped before the end of the plan
  int probe_stop = -1;          // block after which the probe test would have stopped; -1 never
  int full_stop = -1;           // same for the full vector (= visited - 1 when stopped)
  int stable_disagree = 0;      // blocks classified differently by the probe and the full vector
  std::vector<KeyRange> read;   // the keys read, for work counters
};

// Runs the traversal of one query head. (o, lse) starts as the given state (a reused MAC
// prefix, or empty) and ends as the state over it and the keys read. When `split_o` is not
// null, (split_o, split_lse) — also starting as the given state — additionally collects the
// keys read below `split` (MAC's state for the new ring entry).
ArtResult art_traverse(const float* q, const SeqKV& kv, float scale, int d, const ArtParams& p,
                       const ArtPlan& plan, float* o, float& lse, int split = 0, float* split_o = nullptr,
                       float* split_lse = nullptr);

// Mean visited fraction, early-stop rate and probe disagreement over many traversals.
struct ArtStats {
  uint64_t traversals = 0, stopped = 0, stop_disagree = 0, blocks_tested = 0, stable_disagree = 0;
  double visited_fraction = 0;
  void add(const ArtResult& r);
  void add_counters(std::map<std::string, double>& c) const;
};

}  // namespace skim
