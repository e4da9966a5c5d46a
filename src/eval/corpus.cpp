#include "eval/corpus.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace skim::eval {

namespace fs = std::filesystem;

size_t Corpus::total_bytes() const {
  size_t n = 0;
  for (const Document& d : documents) n += d.text.size();
  return n;
}

namespace {

Document read_document(const fs::path& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  SKIM_REQUIRE(in.good(), "{}: cannot read '{}'", flag, path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return Document{path.string(), ss.str()};
}

}  // namespace

Corpus load_corpus(const std::vector<fs::path>& paths, const std::string& flag) {
  SKIM_REQUIRE(!paths.empty(), "{}: no data path given", flag);
  Corpus corpus;
  for (const fs::path& p : paths) {
    std::error_code ec;
    SKIM_REQUIRE(fs::exists(p, ec), "{}: '{}' does not exist", flag, p.string());
    if (!fs::is_directory(p, ec)) {
      corpus.documents.push_back(read_document(p, flag));
      continue;
    }
    std::vector<fs::path> files;
    for (const fs::directory_entry& e : fs::directory_iterator(p)) {
      if (!e.is_regular_file()) continue;
      if (e.path().filename().string().rfind("README", 0) == 0) continue;
      files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    SKIM_REQUIRE(!files.empty(), "{}: folder '{}' has no data files", flag, p.string());
    for (const fs::path& f : files) corpus.documents.push_back(read_document(f, flag));
  }
  std::erase_if(corpus.documents, [](const Document& d) { return d.text.empty(); });
  SKIM_REQUIRE(!corpus.documents.empty(), "{}: every data file is empty", flag);
  return corpus;
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  size_t b = 0;
  while (b < text.size()) {
    size_t e = text.find('\n', b);
    e = e == std::string_view::npos ? text.size() : e + 1;
    lines.push_back(text.substr(b, e - b));
    b = e;
  }
  return lines;
}

}  // namespace skim::eval
