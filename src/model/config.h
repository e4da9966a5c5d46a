// The model's shape and numerics, parsed from a Hugging Face config.json (and
// generation_config.json for stop tokens). Every Llama-family difference lives here as data.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace skim {

struct RopeConfig {
  float theta = 10000.0f;
  std::string type = "default";  // "default" or "llama3"
  // llama3 scaling (rope_type "llama3"); unused otherwise.
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // llama, mistral, qwen2, qwen3
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // explicit in config.json, or hidden_size / num_heads
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-6f;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projection bias (qwen2; llama's attention_bias)
  bool qk_norm = false;         // per-head RMSNorm of q and k before RoPE (qwen3)
  // Attention window in tokens, 0 = none. Set from Mistral's `sliding_window`, or Qwen's when
  // `use_sliding_window` is true; the forward pass must honour it or refuse the model.
  int sliding_window = 0;
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;  // config.json and generation_config.json, merged
  std::string torch_dtype;         // "bfloat16", "float16", "float32" (informational)

  int q_dim() const { return num_heads * head_dim; }
  int kv_dim() const { return num_kv_heads * head_dim; }
  int group_size() const { return num_heads / num_kv_heads; }
};

// Parses and validates dir/config.json (and dir/generation_config.json when present).
// Throws skim::Error naming the file and field on anything missing, mistyped or unsupported.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Same, from JSON text; `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);

}  // namespace skim
