// The text evaluations run on: the documents named by --data (files, or folders whose files
// are taken in name order), for perplexity windows and retrieval haystacks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace skim::eval {

struct Document {
  std::string name;  // path as found, for reports
  std::string text;
};

struct Corpus {
  std::vector<Document> documents;
  size_t total_bytes() const;
};

// Reads every path: a file is one document; a folder gives each regular file in it, sorted by
// name, except README* (a folder's description, not data). Errors name `flag` and the path.
Corpus load_corpus(const std::vector<std::filesystem::path>& paths, const std::string& flag = "--data");

// The lines of a text, each with its '\n' (the last may lack one).
std::vector<std::string_view> split_lines(std::string_view text);

}  // namespace skim::eval
