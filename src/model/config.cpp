#include "model/config.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "core/error.h"

namespace skim {

namespace {

using json = nlohmann::json;

constexpr std::string_view kSupportedModelTypes[] = {"llama", "mistral", "qwen2", "qwen3"};

// Typed access to one JSON object of a config file. `prefix` is the path of the object inside
// the file ("rope_scaling.") so messages name the field as the user would look for it.
class Fields {
 public:
  Fields(const json& object, std::string source, std::string prefix = "")
      : obj_(object), source_(std::move(source)), prefix_(std::move(prefix)) {}

  // A JSON null counts as absent: HF writes `"head_dim": null` for "use the default".
  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  int require_int(const char* key) const {
    const json* v = find(key);
    SKIM_REQUIRE(v, "{}: missing required field '{}{}'", source_, prefix_, key);
    return to_int(*v, key);
  }
  std::optional<int> optional_int(const char* key) const {
    const json* v = find(key);
    return v ? std::optional<int>(to_int(*v, key)) : std::nullopt;
  }
  int positive_int(const char* key, std::optional<int> fallback = std::nullopt) const {
    std::optional<int> v = fallback ? std::optional<int>(optional_int(key).value_or(*fallback))
                                    : std::optional<int>(require_int(key));
    SKIM_REQUIRE(*v > 0, "{}: field '{}{}' must be positive, got {}", source_, prefix_, key, *v);
    return *v;
  }

  double number(const char* key, double fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    SKIM_REQUIRE(v->is_number(), "{}: field '{}{}' must be a number, got {}", source_, prefix_,
                 key, v->type_name());
    return v->get<double>();
  }
  double required_number(const char* key) const {
    SKIM_REQUIRE(has(key), "{}: missing required field '{}{}'", source_, prefix_, key);
    return number(key, 0.0);
  }
  float positive_float(const char* key, std::optional<double> fallback = std::nullopt) const {
    double v = fallback ? number(key, *fallback) : required_number(key);
    SKIM_REQUIRE(v > 0 && v <= std::numeric_limits<float>::max(),
                 "{}: field '{}{}' must be a positive number, got {}", source_, prefix_, key, v);
    return float(v);
  }

  bool boolean(const char* key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    SKIM_REQUIRE(v->is_boolean(), "{}: field '{}{}' must be true or false, got {}", source_,
                 prefix_, key, v->type_name());
    return v->get<bool>();
  }

  std::optional<std::string> optional_string(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    SKIM_REQUIRE(v->is_string(), "{}: field '{}{}' must be a string, got {}", source_, prefix_,
                 key, v->type_name());
    return v->get<std::string>();
  }

  // An int or a list of ints (eos_token_id); absent gives an empty list.
  std::vector<int> int_or_int_list(const char* key) const {
    const json* v = find(key);
    if (!v) return {};
    if (!v->is_array()) return {to_int(*v, key)};
    std::vector<int> out;
    for (const json& e : *v) out.push_back(to_int(e, key));
    return out;
  }

  std::optional<Fields> optional_object(const char* key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    SKIM_REQUIRE(v->is_object(), "{}: field '{}{}' must be an object, got {}", source_, prefix_,
                 key, v->type_name());
    return Fields(*v, source_, prefix_ + key + ".");
  }

  const std::string& source() const { return source_; }
  const std::string& prefix() const { return prefix_; }

 private:
  int to_int(const json& v, const char* key) const {
    SKIM_REQUIRE(v.is_number_integer(), "{}: field '{}{}' must be an integer, got {}", source_,
                 prefix_, key, v.type_name());
    bool fits = v.is_number_unsigned()
                    ? v.get<uint64_t>() <= uint64_t(std::numeric_limits<int>::max())
                    : v.get<int64_t>() >= std::numeric_limits<int>::min() &&
                          v.get<int64_t>() <= std::numeric_limits<int>::max();
    SKIM_REQUIRE(fits, "{}: field '{}{}' = {} does not fit in a 32-bit integer", source_, prefix_,
                 key, v.dump());
    return v.get<int>();
  }

  const json& obj_;
  std::string source_;
  std::string prefix_;
};

// The rope type of a scaling object: newer configs say "rope_type", older ones "type".
std::string rope_type_of(const Fields& scaling, bool required) {
  const char* key = scaling.has("rope_type") ? "rope_type" : "type";
  std::optional<std::string> type = scaling.optional_string(key);
  SKIM_REQUIRE(type || !required, "{}: field '{}rope_type' is missing", scaling.source(),
               scaling.prefix());
  std::string t = type.value_or("default");
  SKIM_REQUIRE(t == "default" || t == "llama3",
               "{}: field '{}{}' is '{}'; supported rope types: default, llama3", scaling.source(),
               scaling.prefix(), key, t);
  return t;
}

void read_llama3_scaling(const Fields& scaling, RopeConfig& rope) {
  rope.factor = scaling.positive_float("factor");
  rope.low_freq_factor = scaling.positive_float("low_freq_factor");
  rope.high_freq_factor = scaling.positive_float("high_freq_factor");
  rope.original_max_position_embeddings =
      scaling.positive_int("original_max_position_embeddings");
  SKIM_REQUIRE(rope.high_freq_factor > rope.low_freq_factor,
               "{}: field '{}high_freq_factor' ({}) must exceed low_freq_factor ({})",
               scaling.source(), scaling.prefix(), rope.high_freq_factor, rope.low_freq_factor);
}

// Three spellings of the same thing, all in use:
//   {"rope_theta": T, "rope_scaling": null}                      (Llama 2/3, Qwen2, Mistral)
//   {"rope_theta": T, "rope_scaling": {"rope_type": "llama3"...}} (Llama 3.1 as first released)
//   {"rope_parameters": {"rope_theta": T, "rope_type": ...}}     (transformers >= 5)
// When two spellings are present they must agree; nothing is silently preferred.
RopeConfig read_rope(const Fields& config) {
  RopeConfig rope;
  std::optional<Fields> params = config.optional_object("rope_parameters");
  std::optional<Fields> scaling = config.optional_object("rope_scaling");

  std::optional<double> theta;
  if (config.has("rope_theta")) theta = config.positive_float("rope_theta");
  if (params && params->has("rope_theta")) {
    double inner = params->positive_float("rope_theta");
    SKIM_REQUIRE(!theta || float(*theta) == float(inner),
                 "{}: 'rope_theta' ({}) and 'rope_parameters.rope_theta' ({}) disagree",
                 config.source(), *theta, inner);
    theta = inner;
  }
  rope.theta = float(theta.value_or(10000.0));

  std::string params_type = params ? rope_type_of(*params, false) : "default";
  std::string scaling_type = scaling ? rope_type_of(*scaling, true) : "default";
  SKIM_REQUIRE(!params || !scaling || params_type == scaling_type,
               "{}: 'rope_parameters' says rope type '{}' but 'rope_scaling' says '{}'",
               config.source(), params_type, scaling_type);
  if (params_type == "llama3") {
    rope.type = "llama3";
    read_llama3_scaling(*params, rope);
  } else if (scaling_type == "llama3") {
    rope.type = "llama3";
    read_llama3_scaling(*scaling, rope);
  }
  return rope;
}

// Mistral sets `sliding_window` directly. Qwen2/3 configs carry a `sliding_window` value that
// applies only when `use_sliding_window` is true, and then only to layers from
// `max_window_layers` on (HF's rule); a model with both kinds of layer is refused.
int read_sliding_window(const Fields& config, const ModelConfig& c) {
  if (c.model_type == "llama") return 0;
  if (c.model_type == "qwen2" || c.model_type == "qwen3") {
    if (!config.boolean("use_sliding_window", false)) return 0;
    int first_sliding = config.optional_int("max_window_layers").value_or(28);
    if (first_sliding >= c.num_layers) return 0;
    SKIM_REQUIRE(first_sliding <= 0,
                 "{}: use_sliding_window with max_window_layers {} makes layers {}..{} sliding "
                 "and the others full; mixed attention kinds are not supported",
                 config.source(), first_sliding, first_sliding, c.num_layers - 1);
  }
  std::optional<int> w = config.optional_int("sliding_window");
  if (!w) return 0;
  SKIM_REQUIRE(*w > 0, "{}: field 'sliding_window' must be positive or null, got {}",
               config.source(), *w);
  return *w;
}

// transformers 5 lists each layer's attention kind. Layers that differ from one another
// (Qwen's max_window_layers) are not supported; all-sliding needs a window.
void check_layer_types(const json& config, int sliding_window, const std::string& source) {
  auto it = config.find("layer_types");
  if (it == config.end() || it->is_null()) return;
  SKIM_REQUIRE(it->is_array(), "{}: field 'layer_types' must be an array, got {}", source,
               it->type_name());
  const char* expected = sliding_window > 0 ? "sliding_attention" : "full_attention";
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    SKIM_REQUIRE(t.is_string(), "{}: field 'layer_types[{}]' must be a string, got {}", source, i,
                 t.type_name());
    SKIM_REQUIRE(t.get_ref<const std::string&>() == expected,
                 "{}: field 'layer_types[{}]' is '{}' but the config implies '{}' for every "
                 "layer; mixed attention kinds are not supported",
                 source, i, t.get_ref<const std::string&>(), expected);
  }
}

void check_model_type(const std::string& type, const std::string& source) {
  bool ok = std::find(std::begin(kSupportedModelTypes), std::end(kSupportedModelTypes), type) !=
            std::end(kSupportedModelTypes);
  SKIM_REQUIRE(ok, "{}: model_type '{}' is not supported (supported: {})", source, type,
               fmt::join(kSupportedModelTypes, ", "));
}

// Features that would change the computation and that the forward pass does not implement:
// refused here so a checkpoint never runs with them silently dropped.
void reject_unsupported_features(const Fields& config) {
  SKIM_REQUIRE(!config.boolean("mlp_bias", false),
               "{}: field 'mlp_bias' is true; MLP biases are not supported", config.source());
  std::optional<std::string> act = config.optional_string("hidden_act");
  SKIM_REQUIRE(!act || *act == "silu",
               "{}: field 'hidden_act' is '{}'; only 'silu' is supported", config.source(), *act);
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  SKIM_REQUIRE(in, "{}: cannot open (is this a Hugging Face model directory?)", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json_object(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", source, e.what());
  }
  SKIM_REQUIRE(j.is_object(), "{}: must be a JSON object, got {}", source, j.type_name());
  return j;
}

void append_unique(std::vector<int>& to, const std::vector<int>& from) {
  for (int id : from)
    if (std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json j = parse_json_object(json_text, source);
  Fields f(j, source);
  ModelConfig c;

  std::optional<std::string> type = f.optional_string("model_type");
  SKIM_REQUIRE(type, "{}: missing required field 'model_type'", source);
  check_model_type(*type, source);
  c.model_type = *type;
  reject_unsupported_features(f);

  c.vocab_size = f.positive_int("vocab_size");
  c.hidden_size = f.positive_int("hidden_size");
  c.intermediate_size = f.positive_int("intermediate_size");
  c.num_layers = f.positive_int("num_hidden_layers");
  c.num_heads = f.positive_int("num_attention_heads");
  c.num_kv_heads = f.positive_int("num_key_value_heads", c.num_heads);
  c.max_position_embeddings = f.positive_int("max_position_embeddings");
  c.rms_norm_eps = f.positive_float("rms_norm_eps", 1e-6);

  if (f.has("head_dim")) {
    c.head_dim = f.positive_int("head_dim");
  } else {
    SKIM_REQUIRE(c.hidden_size % c.num_heads == 0,
                 "{}: no 'head_dim' and hidden_size {} is not a multiple of num_attention_heads {}",
                 source, c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  SKIM_REQUIRE(c.head_dim % 2 == 0, "{}: head_dim {} must be even (RoPE rotates pairs)", source,
               c.head_dim);
  SKIM_REQUIRE(c.num_kv_heads <= c.num_heads && c.num_heads % c.num_kv_heads == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", source,
               c.num_heads, c.num_kv_heads);

  c.rope = read_rope(f);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  // Qwen2 always has q/k/v biases (its config does not say so); the others follow the field.
  c.attention_bias = c.model_type == "qwen2" ? true : f.boolean("attention_bias", false);
  c.qk_norm = c.model_type == "qwen3";
  c.sliding_window = read_sliding_window(f, c);
  check_layer_types(j, c.sliding_window, source);

  c.bos_token_id = f.optional_int("bos_token_id").value_or(-1);
  c.eos_token_ids = f.int_or_int_list("eos_token_id");
  // transformers 5 writes "dtype", older versions "torch_dtype".
  c.torch_dtype = f.optional_string("torch_dtype").value_or(f.optional_string("dtype").value_or(""));
  return c;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  std::filesystem::path config_path = model_dir / "config.json";
  ModelConfig c = parse_model_config(read_text_file(config_path), config_path.string());

  std::filesystem::path gen_path = model_dir / "generation_config.json";
  if (std::filesystem::exists(gen_path)) {
    json gen = parse_json_object(read_text_file(gen_path), gen_path.string());
    append_unique(c.eos_token_ids, Fields(gen, gen_path.string()).int_or_int_list("eos_token_id"));
  }
  return c;
}

}  // namespace skim
