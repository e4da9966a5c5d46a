// Parity driver without GoogleTest, for the GPU machine (scripts/gpu-check.sh builds it with
// plain nvcc). Prints one line per case and exits non-zero if any case fails.
//   paged_decode_parity [--seed N] [--quick]
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "paged_decode_parity.h"

int main(int argc, char** argv) {
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seed") && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--quick")) quick = true;
  }
  if (!skim::test::cuda_device_present()) {
    std::printf("no CUDA device: skipped\n");
    return 0;
  }
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  std::printf("%-44s %12s %12s %10s %s\n", "case", "o_rel_err", "lse_abs_err", "ws_bytes", "result");
  int failed = 0, n = 0;
  double worst_o = 0, worst_lse = 0;
  uint64_t s = seed;
  for (const auto& c : skim::test::default_parity_cases(quick)) {
    const auto r = skim::test::run_parity_case(c, s++);
    const bool ok = r.pass();
    failed += !ok;
    ++n;
    if (r.o_rel_err > worst_o) worst_o = r.o_rel_err;
    if (r.lse_abs_err > worst_lse) worst_lse = r.lse_abs_err;
    std::printf("%-44s %12.3e %12.3e %10zu %s%s%s%s%s\n", c.name().c_str(), r.o_rel_err,
                r.lse_abs_err, r.workspace_bytes, ok ? "ok" : "FAIL", r.error.empty() ? "" : " ",
                r.error.c_str(), r.all_finite ? "" : " non-finite", r.deterministic ? "" : " nondeterministic");
    if (!r.empty_ok) std::printf("  empty sequence state wrong\n");
  }
  std::printf("parity: %d/%d cases passed, worst o_rel_err %.3e, worst lse_abs_err %.3e (thresholds 2e-3, 1e-3)\n",
              n - failed, n, worst_o, worst_lse);
  return failed ? 1 : 0;
}
