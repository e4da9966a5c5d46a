#include "tokenizer/split.h"

#include <algorithm>

namespace skim::tok {

bool parse_split_behavior(const std::string& name, SplitBehavior* behavior) {
  if (name == "Removed") *behavior = SplitBehavior::kRemoved;
  else if (name == "Isolated") *behavior = SplitBehavior::kIsolated;
  else if (name == "MergedWithPrevious") *behavior = SplitBehavior::kMergedWithPrevious;
  else if (name == "MergedWithNext") *behavior = SplitBehavior::kMergedWithNext;
  else if (name == "Contiguous") *behavior = SplitBehavior::kContiguous;
  else return false;
  return true;
}

std::vector<Span> split_pieces(size_t length, const std::vector<Span>& matches, SplitBehavior behavior,
                               bool invert) {
  struct Part {
    Span span;
    bool is_match;
  };
  // The text as alternating runs of matched and unmatched bytes.
  std::vector<Part> parts;
  size_t previous = 0;
  for (const Span& m : matches) {
    if (m.first > previous) parts.push_back({{previous, m.first}, invert});
    parts.push_back({m, !invert});
    previous = m.second;
  }
  if (previous < length) parts.push_back({{previous, length}, invert});

  std::vector<Span> pieces;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& p : parts) pieces.push_back(p.span);
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : parts)
        if (!p.is_match) pieces.push_back(p.span);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !pieces.empty()) {
          pieces.back().second = p.span.second;
        } else {
          pieces.push_back(p.span);
        }
        previous_match = p.is_match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool next_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !next_match && !pieces.empty()) {
          pieces.back().first = it->span.first;
        } else {
          pieces.push_back(it->span);
        }
        next_match = it->is_match;
      }
      std::reverse(pieces.begin(), pieces.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (size_t i = 0; i < parts.size(); ++i) {
        if (i > 0 && parts[i].is_match == previous_match) {
          pieces.back().second = parts[i].span.second;
        } else {
          pieces.push_back(parts[i].span);
        }
        previous_match = parts[i].is_match;
      }
      break;
    }
  }
  std::erase_if(pieces, [](const Span& s) { return s.first == s.second; });
  return pieces;
}

}  // namespace skim::tok
