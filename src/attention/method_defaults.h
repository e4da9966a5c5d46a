// Defaults of ART's and MAC's parameters, held once: the CPU policies' params (art.h, mac.h)
// and the kernels' per-policy rules (art_decode_args.h, mac_decode_args.h) start from them.
// Chosen on SmolLM2-135M and the demo model (docs/results.md "Defaults").
#pragma once

namespace skim {

// ART: 10x stricter than the paper's 1e-3 / 1e-5, which kept perplexity on SmolLM2 but stopped
// before the block holding an 8K needle dense finds.
inline constexpr double kArtEpsScale = 1e-4;
inline constexpr double kArtEpsDir = 1e-6;
inline constexpr int kArtPatience = 16;
// The group rule (art:stop=group, the GPU kernel's): a test every 8 blocks, 2 stable tests in a
// row, so the same 16 blocks of stability. On the GPU each test is a verdict the kernel's warps
// wait on (about 3-4 us a round at batch 1): at rounds of one block ART over dense took 8x
// dense's step at 32K, at 8 blocks 2x (H100). SmolLM2 at 8K: perplexity +0.04% / +0.01%, KV read
// 0.81 / 0.89 of dense at rounds of 1 / 8 (bench/results/2026-11-27-s27-art-group-round/).
inline constexpr int kArtGroupRound = 8;
inline constexpr int kArtGroupPatience = 2;

// MAC: the paper's tau 0.45 costs SmolLM2 +6% perplexity at 4K (0.75: +1.1%, 0.9: +0.3%); 0.8
// kept perplexity but lost an 8K needle dense finds, which 0.9 keeps.
inline constexpr double kMacTau = 0.9;
inline constexpr int kMacWindow = 256;
inline constexpr int kMacBand = 256;
inline constexpr int kMacMinContext = 2048;

}  // namespace skim
