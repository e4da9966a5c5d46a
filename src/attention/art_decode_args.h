// Arguments of ART decode attention, shared by the CUDA kernel and its CPU reference
// (skim::cuda::art_decode_attention and skim::cpu::art_decode_attention take the same struct):
// paged decode attention that visits each list in its order and stops reading once the
// running output is stable (seeds/003; DESIGN.md section 9; the CPU policy is attention/art.h).
//
// The traversal, per (sequence, KV head) list of `attn` (tables_per_kv_head, groups of at most
// 8 query heads, head_masks optional):
//   * the list is in visiting order (the base policy's priority); its only partial page, if
//     any, is listed FIRST (the newest page, which every order visits first); seq_lens counts
//     the listed tokens;
//   * blocks of kArtBlockPages pages (64 tokens), rounds of round_pages pages, or longer in a
//     long list (art_list_round_pages: at most about kArtMaxVerdicts rounds a list); after round r
//     the group's running state over rounds 0..r is tested against the state after round r-1,
//     per query head, on a 32-element probe of the normalised output (art_probe_dim: the
//     elements one warp's lanes hold in the GPU kernel's MMA layout, as the paper's probe): the
//     round is stable for a head when |(|o_r| - |o_r-1|)| / |o_r-1| < eps_scale and
//     1 - cos(o_r, o_r-1) < eps_dir (never after round 0: nothing to compare); a head's count
//     of consecutive stable rounds resets on an unstable one; the list stops at the first round
//     s where every head of the group that attends some page of the list has counted
//     `patience` (a head whose mask bit no page of the list has never gets a key, and an empty
//     state is never stable: MAC's `below` lists leave such heads, art_heads_listed; the CUDA
//     kernel does not scan the masks for them, so it applies this where heads_listed is given).
//     The last round is not tested;
//   * the pages read are rounds 0 .. s + lag (all of them when no round stops; lag is lag_rounds
//     in rounds of round_pages, art_list_lag in the list's rounds): the
//     GPU's CTAs read ahead while a round is tested, and lag_rounds makes how far a fixed part
//     of the definition, so the result does not depend on timing (bit-reproducible).
//     cuda::art_decode_lag gives the lag at which the kernel never waits for a test.
// o and lse are those of paged decode attention over the pages read. stats (optional) is
// added to: lists traversed, lists stopped early, pages listed, pages read.
#pragma once

#include <cstdint>

#include "attention/paged_decode_args.h"
#include "attention/method_defaults.h"
#include "core/host_device.h"

namespace skim {

inline constexpr int kArtBlockPages = 4;  // 64 tokens of 16-token pages: a GPU warp's batch
inline constexpr int kArtProbe = 32;      // probe elements per query head
inline constexpr int kArtMaxGroup = 8;    // query heads per list (one MMA tile)

// Dimension of probe element e (0..31) for head_dim d (64 or 128): element e is held by lane
// quad e / 8 of the head's MMA row as its (e % 8)-th probe value, dims 8t + 2 * quad with
// t = (e % 8) * d / 64.
SKIM_HOST_DEVICE inline int art_probe_dim(int e, int d) { return 8 * ((e % 8) * (d / 64)) + 2 * (e / 8); }

// The heads of a group of `group` (at most 32) that attend some page of a list's n_pages
// masks (null: every head every page), bit g for head g.
SKIM_HOST_DEVICE inline uint32_t art_heads_listed(const uint32_t* masks, int n_pages, int group) {
  const uint32_t all = group >= 32 ? ~0u : (1u << group) - 1;
  if (!masks) return all;
  uint32_t listed = 0;
  for (int i = 0; i < n_pages && listed != all; ++i) listed |= masks[i];
  return listed & all;
}

// A list's rounds grow with it: at most about kArtMaxVerdicts verdicts a list, each round at
// most kArtMaxRoundBlocks blocks (the GPU kernel merges a round's blocks in one pass). A verdict
// costs the GPU kernel a few microseconds of serial merges, and at rounds of 8 blocks a 128K
// list that never stops took 256 of them: ART over dense cost 3.7x dense's step at batch 1
// (H100, 2026-11-27). Lists of up to kArtMaxVerdicts rounds (16K tokens at rounds of 8 blocks)
// keep their rule's round.
inline constexpr int kArtMaxVerdicts = 32;
inline constexpr int kArtMaxRoundBlocks = 32;

// The round, in pages, of a list of n_pages under a rule of round_pages in blocks of block_pages
// (kArtBlockPages on the GPU and in its reference; art:block on the CPU): the rule's where it
// cuts the list into at most kArtMaxVerdicts rounds, else the fewest whole blocks (up to
// kArtMaxRoundBlocks) that do.
SKIM_HOST_DEVICE inline int art_list_round_pages(int round_pages, int n_pages, int block_pages) {
  if (n_pages <= kArtMaxVerdicts * round_pages) return round_pages;
  const int per_verdict = (n_pages + kArtMaxVerdicts - 1) / kArtMaxVerdicts;
  int blocks = (per_verdict + block_pages - 1) / block_pages;
  if (blocks > kArtMaxRoundBlocks) blocks = kArtMaxRoundBlocks;
  return blocks * block_pages > round_pages ? blocks * block_pages : round_pages;
}

// The lag in a list's rounds (list_round_pages) for a lag of lag_rounds rounds of round_pages:
// the same reach in pages, rounded up, so a warp of the GPU kernel still never waits on a round
// it has pages of in flight (the lag covers the rounds between its consecutive blocks).
SKIM_HOST_DEVICE inline int art_list_lag(int lag_rounds, int round_pages, int list_round_pages) {
  return (lag_rounds * round_pages + list_round_pages - 1) / list_round_pages;
}

struct ArtDecodeStats {
  unsigned long long lists = 0, stopped = 0, pages_listed = 0, pages_read = 0;
};

struct ArtDecodeParams {
  int round_pages = 16;  // a multiple of kArtBlockPages
  int lag_rounds = 0;
  int patience = kArtPatience;
  float eps_scale = float(kArtEpsScale), eps_dir = float(kArtEpsDir);
  // GPU only: at most this many warps per list (0: as many as paged decode attention would
  // use). Fewer warps read less past a stop (the lag is a wave of them) and more slowly.
  int max_warps = 0;
  // The fp32 CPU kernel only (the CPU policy's art:test=full, art:block): the test on the whole
  // normalised output instead of the probe; blocks of this many pages (the merge granularity;
  // round_pages need not be a multiple of it there).
  bool full_test = false;
  int block_pages = kArtBlockPages;
};

// One policy's rule, for a batch whose rows follow several (a decode batch mixing ART with other
// policies). active 0: the row is read whole, its list in paged decode attention's order (the
// partial page last), and counts in no stats; else ART as above with these parameters, the lag
// at least the launch's (art.lag_rounds) and round_pages at least art.round_pages (which sizes
// the workspace), a multiple of 4 of at most 128.
struct ArtRowRule {
  int active = 1;
  int round_pages = 16, lag_rounds = 0, patience = kArtPatience;
  float eps_scale = float(kArtEpsScale), eps_dir = float(kArtEpsDir);
  int max_warps = 0;  // the policy's art.max_warps (a launch takes the smallest one set; kernels ignore it)
};

// The element type is a parameter, as for PagedDecodeArgsOf: ArtDecodeArgs (bf16) is the CUDA
// kernel's and its reference's, ArtDecodeArgsF32 the CPU cache's (the CPU engine's kernel).
template <class Elem>
struct ArtDecodeArgsOf {
  PagedDecodeArgsOf<Elem> attn;  // tables_per_kv_head
  ArtDecodeParams art;
  ArtDecodeStats* stats = nullptr;  // device memory for the CUDA call, host for the CPU one
  // Optional, together: row b follows rules[row_policy[b]] instead of `art` (device memory for
  // the CUDA call, host for the CPU one).
  const int32_t* row_policy = nullptr;
  const ArtRowRule* rules = nullptr;
  // CPU kernels only, optional: the pages read of each list ([batch][num_kv_heads], host), for
  // the engine's per-list counters. The CUDA kernel counts into `stats` only.
  int32_t* list_pages_read = nullptr;
  // Optional, [batch][num_kv_heads] (device memory for the CUDA call, host for the CPU one): each
  // list's art_heads_listed, from a plan that has it at hand (mac+art's `below`: the heads a
  // hit's band leaves out). The CUDA kernel applies the rule for heads without a page only where
  // it is given (with head_masks); the CPU forms compute it from the masks either way (the bf16
  // reference refuses one that differs).
  const uint32_t* heads_listed = nullptr;
};

using ArtDecodeArgs = ArtDecodeArgsOf<uint16_t>;
using ArtDecodeArgsF32 = ArtDecodeArgsOf<float>;

}  // namespace skim
