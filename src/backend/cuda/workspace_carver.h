// Carves one workspace allocation into pieces aligned to 256 bytes, in order: a layout function
// runs it once with a null base to size the workspace (every piece null), then with the real
// base (every piece at its offset). Host code but align(), which kernels that locate a piece
// themselves call too.
#pragma once

#include <cstddef>

#include "core/host_device.h"

namespace skim::cuda {

class WorkspaceCarver {
 public:
  SKIM_HOST_DEVICE static constexpr size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

  explicit WorkspaceCarver(void* base) : base_(static_cast<char*>(base)) {}
  // The next piece of `count` elements of T (null while sizing).
  template <class T>
  T* take(size_t count) {
    char* p = base_ ? base_ + at_ : nullptr;
    at_ += align(count * sizeof(T));
    return reinterpret_cast<T*>(p);
  }
  size_t bytes() const { return at_; }

 private:
  char* base_;
  size_t at_ = 0;
};

}  // namespace skim::cuda
