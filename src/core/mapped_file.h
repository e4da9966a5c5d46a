// A read-only memory mapping of a whole file. Weights are read straight from the page cache,
// so opening a model costs no copy until a tensor is converted.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace skim {

class MappedFile {
 public:
  // Throws skim::Error naming the path when it cannot be opened or mapped. An empty file maps
  // to size() == 0 and data() == nullptr (mmap refuses zero lengths).
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(addr_); }
  size_t size() const { return size_; }

 private:
  void* addr_ = nullptr;
  size_t size_ = 0;
};

}  // namespace skim
