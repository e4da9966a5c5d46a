// libFuzzer: config.json parsing must reject any input with skim::Error, and an accepted config
// must satisfy what the forward pass relies on.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    skim::ModelConfig c =
        skim::parse_model_config(std::string(reinterpret_cast<const char*>(data), size),
                                 "fuzz/config.json");
    bool sane = c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 &&
                c.num_layers > 0 && c.num_heads > 0 && c.num_kv_heads > 0 &&
                c.num_heads % c.num_kv_heads == 0 && c.head_dim > 0 && c.head_dim % 2 == 0 &&
                c.rms_norm_eps > 0 && c.rope.theta > 0 && c.sliding_window >= 0 &&
                (c.rope.type == "default" || c.rope.type == "llama3");
    if (!sane) std::abort();
  } catch (const skim::Error&) {
  }
  return 0;
}
