// libFuzzer: the safetensors header parser must reject any input with skim::Error, and every
// tensor it accepts must lie inside the input with a size matching its shape and dtype.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto tensors = skim::parse_safetensors(data, size, "fuzz.safetensors");
    for (const auto& [name, t] : tensors) {
      auto* begin = static_cast<const uint8_t*>(t.data);
      if (begin < data || begin + t.nbytes > data + size) std::abort();
      if (size_t(t.numel()) * skim::dtype_size(t.dtype) != t.nbytes) std::abort();
      // Touch both ends so AddressSanitizer checks the bounds too.
      if (t.nbytes > 0) {
        volatile uint8_t sink = begin[0];
        sink = begin[t.nbytes - 1];
        (void)sink;
      }
    }
  } catch (const skim::Error&) {
  }
  return 0;
}
