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

// MAC: the paper's tau 0.45 costs SmolLM2 +6% perplexity at 4K (0.75: +1.1%, 0.9: +0.3%); 0.8
// kept perplexity but lost an 8K needle dense finds, which 0.9 keeps.
inline constexpr double kMacTau = 0.9;
inline constexpr int kMacWindow = 256;
inline constexpr int kMacBand = 256;
inline constexpr int kMacMinContext = 2048;

}  // namespace skim
