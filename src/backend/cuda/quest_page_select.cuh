// Quest's page selection on the GPU (contract and layouts in attention/quest_page_select_args.h;
// CPU reference skim::cpu::quest_page_select, same name and arguments).
//
// Three kernels, no host synchronisation (captures into a CUDA graph). score: one warp per
// page and query head writes the bound's order-preserving key (the newest page highest).
// select: one CTA per (sequence, query head) finds its n best pages by the radix select of
// page_select_common.cuh and flags them. union: one CTA per (sequence, KV head) ORs its
// group's flags into a mask per page and writes the listed pages in position order with a
// block-wide scan. (A fused kernel doing all three per (sequence, KV head) in shared memory
// was measured 1.7-2.9x slower at 8K-32K on the H100: too few CTAs; removed, see
// bench/results/2026-11-26-h100-pending/. Also tried: select and union as one launch on sm_90,
// a cluster of the group's select CTAs whose first CTA wrote the union after the cluster
// barrier: 598 against 638 us a step in ncu at b1 32K, but end to end +0.3% at b1 and +3.7% at
// b8 (11.47 against 11.06 ms), bench/results/2026-11-27-h100-s23-pending/; reverted. And the
// last of a group's select CTAs writing the union after an atomic count: the kernels 1-3%
// faster alone, end to end +0.2% at b1 and +0.4% at b8 32K on the H100, 2026-11-28; and one
// CTA per KV head selecting its whole group (the radix passes interleaved, a histogram per head)
// and listing the union from its keep bits: equal lists, 25 us alone at b8 32K against 12.8 +
// 5.3 for select and union; bench/results/2026-11-28-s29-art-verdict-warp/; both reverted.)
// This header holds no device code.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "attention/quest_page_select_args.h"

namespace skim::cuda {

// Bytes of workspace: a key and a flag per (sequence, query head, page slot).
size_t quest_page_select_workspace_size(const QuestPageSelectArgs& args);

// Device pointers in args; asynchronous on `stream`. Supported: head_dim 64 or 128, groups
// of at most 32 query heads. Returns cudaErrorInvalidValue for unsupported shapes or
// parameters or a too small workspace.
cudaError_t quest_page_select(const QuestPageSelectArgs& args, cudaStream_t stream);

}  // namespace skim::cuda
