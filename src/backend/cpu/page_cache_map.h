// The page cache map of KV beyond GPU memory on the host (kv/page_cache_args.h): the reference a
// device kernel with the same arguments is tested against, and what a CPU simulation of the
// cache runs.
#pragma once

#include "kv/page_cache_args.h"

namespace skim::cpu {

// Maps the plan onto the cache (kv/page_cache_args.h's steps 1-4). Returns false, with
// counts[2] = 1 and nothing changed, when the step's distinct pages exceed the slots. Throws
// std::invalid_argument on a page id outside [0, num_host_pages).
bool page_cache_map(const PageCacheArgs& args);

}  // namespace skim::cpu
