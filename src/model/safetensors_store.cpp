// TensorStore: the safetensors files of one model directory, indexed by tensor name.
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "core/error.h"
#include "model/safetensors.h"

namespace skim {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

json read_json_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  SKIM_REQUIRE(in, "{}: cannot open", path.string());
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path.string(), e.what());
  }
}

// tensor name -> shard file name, from the index's weight_map. Shard names must be plain file
// names in the model directory: an index is data, it must not point elsewhere.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  json index = read_json_file(index_path);
  SKIM_REQUIRE(index.is_object(), "{}: must be a JSON object", index_path.string());
  auto it = index.find("weight_map");
  SKIM_REQUIRE(it != index.end(), "{}: missing field 'weight_map'", index_path.string());
  SKIM_REQUIRE(it->is_object(), "{}: field 'weight_map' must be an object, got {}",
               index_path.string(), it->type_name());
  std::map<std::string, std::string> map;
  for (const auto& [tensor, shard] : it->items()) {
    SKIM_REQUIRE(shard.is_string(), "{}: weight_map['{}'] must be a file name string, got {}",
                 index_path.string(), tensor, shard.type_name());
    const auto& file = shard.get_ref<const std::string&>();
    SKIM_REQUIRE(!file.empty() && fs::path(file).filename() == fs::path(file) && file != "." &&
                     file != "..",
                 "{}: weight_map['{}'] = '{}' is not a file name in the model directory",
                 index_path.string(), tensor, file);
    map.emplace(tensor, file);
  }
  SKIM_REQUIRE(!map.empty(), "{}: 'weight_map' lists no tensors", index_path.string());
  return map;
}

std::string list_safetensors_in(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") found.push_back(entry.path().filename());
  if (found.empty()) return "no .safetensors files there";
  std::sort(found.begin(), found.end());
  return fmt::format("found {}, but no index naming them", fmt::join(found, ", "));
}

}  // namespace

TensorStore::TensorStore(const fs::path& model_dir) : dir_(model_dir) {
  SKIM_REQUIRE(fs::is_directory(dir_), "{}: not a directory", dir_.string());
  fs::path index_path = dir_ / kIndexFile;
  std::map<std::string, std::string> weight_map;  // empty for a single file
  std::vector<std::string> shards;
  if (fs::exists(index_path)) {
    weight_map = read_weight_map(index_path);
    std::set<std::string> unique;
    for (const auto& [_, shard] : weight_map) unique.insert(shard);
    shards.assign(unique.begin(), unique.end());
    for (const auto& shard : shards)
      SKIM_REQUIRE(fs::exists(dir_ / shard), "{}: shard '{}' is listed but {} does not exist",
                   index_path.string(), shard, (dir_ / shard).string());
  } else {
    SKIM_REQUIRE(fs::exists(dir_ / kSingleFile), "{}: no {} or {} ({})", dir_.string(), kSingleFile,
                 kIndexFile, list_safetensors_in(dir_));
    shards.push_back(kSingleFile);
  }

  for (const auto& shard : shards) {
    files_.push_back(std::make_unique<SafetensorsFile>(dir_ / shard));
    const SafetensorsFile& file = *files_.back();
    for (const auto& [name, view] : file.tensors()) {
      auto [it, inserted] = index_.emplace(name, &view);
      SKIM_REQUIRE(inserted, "{}: tensor '{}' is in both {} and {}", dir_.string(), name,
                   it->second->file, view.file);
    }
  }

  for (const auto& [tensor, shard] : weight_map) {
    auto it = index_.find(tensor);
    fs::path expected = dir_ / shard;
    SKIM_REQUIRE(it != index_.end() && fs::path(it->second->file) == expected,
                 "{}: tensor '{}' is listed in shard '{}' but {}", index_path.string(), tensor,
                 shard,
                 it == index_.end() ? std::string("no shard holds it")
                                    : fmt::format("is found in {}", it->second->file));
  }
}

const TensorView& TensorStore::get(const std::string& name) const {
  auto it = index_.find(name);
  SKIM_REQUIRE(it != index_.end(), "{}: no tensor '{}' in the checkpoint", dir_.string(), name);
  return *it->second;
}

bool TensorStore::has(const std::string& name) const { return index_.count(name) > 0; }

}  // namespace skim
