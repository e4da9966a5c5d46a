// The Llama-family forward pass (Llama 2/3, Mistral, Qwen2/2.5, Qwen3, SmolLM2), written once
// over the Backend ops: the CPU and the GPU run this same sequence.
#pragma once

#include "backend/backend.h"
#include "model/config.h"

namespace skim {

// n staged rows through every layer, then the logits of n_logits rows (none when 0).
void llama_forward(Backend& backend, const ModelConfig& config, int n, int n_logits);

// Layer l of n staged rows: its attention sublayer (the norm adding y into x first, past layer
// 0), then its MLP sublayer, leaving the MLP's output in y. llama_forward is embed, these for
// every layer, then the final norm and the logits; a prompt run layer by layer (the GPU over KV
// beyond its memory) calls them itself, chunk by chunk.
void llama_layer(Backend& backend, int layer, int n);

}  // namespace skim
