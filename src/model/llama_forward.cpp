#include "model/llama_forward.h"

namespace skim {

void llama_layer(Backend& be, int l, int n) {
  // Attention sublayer; the first layer has no MLP output to add yet.
  be.add_rmsnorm(n, l, NormWeight::attn, /*residual=*/l > 0);
  be.linear(n, l, Projection::qkv);
  be.qkv_rope_append(n, l);
  be.attention(n, l);
  be.linear(n, l, Projection::o);
  be.all_reduce(n);
  // MLP sublayer.
  be.add_rmsnorm(n, l, NormWeight::mlp, /*residual=*/true);
  be.linear(n, l, Projection::gate_up);
  be.silu_mul(n);
  be.linear(n, l, Projection::down);
  be.all_reduce(n);
}

void llama_forward(Backend& be, const ModelConfig& c, int n, int n_logits) {
  be.embed(n);
  for (int l = 0; l < c.num_layers; ++l) llama_layer(be, l, n);
  be.add_rmsnorm(n, c.num_layers, NormWeight::final, /*residual=*/true);
  if (n_logits > 0) be.logits(n_logits);
}

}  // namespace skim
