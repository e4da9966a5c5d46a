// Checked access to tokenizer.json: every failure names the file and the JSON path at fault.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace skim::tok {

class JsonAt {
 public:
  JsonAt(const nlohmann::json& value, const std::string& source, std::string path)
      : value_(value), source_(source), path_(std::move(path)) {}

  const nlohmann::json& value() const { return value_; }
  const std::string& source() const { return source_; }
  const std::string& path() const { return path_; }

  bool is_null() const { return value_.is_null(); }
  // Present and not null.
  bool has(std::string_view key) const;
  JsonAt at(std::string_view key) const;  // required member of an object
  JsonAt at(size_t index) const;          // element of an array
  size_t size() const;                    // of an array
  JsonAt get_or_null(std::string_view key) const;

  std::string str() const;
  bool boolean() const;
  int64_t integer() const;
  std::string str(std::string_view key, std::string_view fallback) const;
  bool boolean(std::string_view key, bool fallback) const;
  // The "type" member that names a component.
  std::string type() const { return at("type").str(); }

  [[noreturn]] void fail(std::string_view why) const;

 private:
  const nlohmann::json& value_;
  const std::string& source_;
  std::string path_;
};

}  // namespace skim::tok
