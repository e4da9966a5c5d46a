#include "tokenizer/bpe.h"

#include <fmt/format.h>

#include <queue>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace skim::tok {

namespace {

constexpr size_t kCacheableWordBytes = 256;
constexpr size_t kCacheCapacity = 1 << 16;

uint64_t pair_key(int left, int right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

}  // namespace

BpeModel::BpeModel(std::unordered_map<std::string, int> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges, BpeOptions options,
                   const std::string& source)
    : vocab_(std::move(vocab)), options_(options) {
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int left_id = find(left), right_id = find(right), result = find(left + right);
    if (left_id < 0 || right_id < 0 || result < 0) {
      skim::fail("{}: field 'model.merges[{}]': merge of tokens not in the vocabulary", source, rank);
    }
    // A repeated pair keeps its last rank, as Hugging Face's map does.
    merges_.insert_or_assign(pair_key(left_id, right_id), Merge{static_cast<int>(rank), result});
  }
  for (int b = 0; b < 256; ++b) byte_tokens_[b] = find(fmt::format("<0x{:02X}>", b));
}

int BpeModel::find(std::string_view symbol) const {
  auto it = vocab_.find(std::string(symbol));
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::initial_symbols(std::string_view word, std::vector<int>& ids) const {
  bool previous_unk = false;
  for (size_t pos = 0; pos < word.size();) {
    size_t length = options_.byte_level ? 1 : utf8_step(word, pos).length;
    std::string_view symbol = word.substr(pos, length);
    pos += length;
    if (int id = find(symbol); id >= 0) {
      ids.push_back(id);
      previous_unk = false;
      continue;
    }
    if (options_.byte_fallback) {
      bool all_bytes = true;
      for (char c : symbol) all_bytes = all_bytes && byte_tokens_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        for (char c : symbol) ids.push_back(byte_tokens_[static_cast<unsigned char>(c)]);
        previous_unk = false;
        continue;
      }
    }
    // Without an unk token Hugging Face drops the character; so does skim.
    if (options_.unk_id >= 0 && !(options_.fuse_unk && previous_unk)) ids.push_back(options_.unk_id);
    previous_unk = options_.unk_id >= 0;
  }
}

void BpeModel::merge_symbols(std::vector<int>& ids) const {
  const int n = static_cast<int>(ids.size());
  if (n < 2) return;
  // A doubly linked list over the symbols; merged-away symbols get id -1.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int rank;
    int pos;
    int result;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto consider = [&](int left) {
    const int right = next[left];
    if (left < 0 || right < 0) return;
    auto it = merges_.find(pair_key(ids[left], ids[right]));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.result});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    const int left = top.pos, right = next[left];
    // Stale: the left symbol was merged away or its right neighbour changed since.
    if (ids[left] < 0 || right < 0) continue;
    auto it = merges_.find(pair_key(ids[left], ids[right]));
    if (it == merges_.end() || it->second.result != top.result) continue;
    ids[left] = top.result;
    ids[right] = -1;
    next[left] = next[right];
    if (next[left] >= 0) prev[next[left]] = left;
    if (prev[left] >= 0) consider(prev[left]);
    consider(left);
  }
  std::erase(ids, -1);
}

void BpeModel::encode_word(std::string_view word, std::vector<int>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (int id = find(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheableWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (auto it = cache_.find(std::string(word)); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  merge_symbols(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheCapacity) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace skim::tok
