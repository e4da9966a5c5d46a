// Safetensors files, memory-mapped: one file or a sharded set with
// model.safetensors.index.json. Headers are validated before any tensor is touched.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace skim {

class MappedFile;

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // points into the mapping; valid while the store lives
  size_t nbytes = 0;
  std::string file;  // which file holds it, for messages

  int64_t numel() const;
};

// One mapped .safetensors file.
class SafetensorsFile {
 public:
  // Maps and validates the file: header length and JSON, dtypes we support (F32, F16, BF16),
  // shapes times dtype size equal to offsets, offsets inside the data region, no overlaps.
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::unique_ptr<MappedFile> mapping_;
  std::map<std::string, TensorView> tensors_;
};

// Validates a header given as bytes (the 8-byte length, JSON, data) without a file: the parser
// the fuzzer drives. Returns the tensors with `data` pointing into `bytes` and `file` = source.
// Gaps between tensors are accepted (only overlaps and out-of-range offsets are errors).
std::map<std::string, TensorView> parse_safetensors(const uint8_t* bytes, size_t size,
                                                     const std::string& source);

// All tensors of a model directory: model.safetensors, or the shards listed in
// model.safetensors.index.json (every listed tensor must be in the shard the index names).
// Tensors a shard holds beyond its index entries are kept too (the weights check then reports
// them as unexpected); a tensor in two files is an error.
class TensorStore {
 public:
  explicit TensorStore(const std::filesystem::path& model_dir);

  // Throws skim::Error naming the tensor (and the model dir) when absent.
  const TensorView& get(const std::string& name) const;
  bool has(const std::string& name) const;
  const std::map<std::string, const TensorView*>& all() const { return index_; }

 private:
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

}  // namespace skim
