// Hugging Face's SplitDelimiterBehavior: how a split pre-tokenizer turns the matches of its
// pattern into pieces.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace skim::tok {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Parses "Removed", "Isolated", ...; false when the name is unknown.
bool parse_split_behavior(const std::string& name, SplitBehavior* behavior);

// The non-empty pieces of a text of `length` bytes, given the matches of the pattern.
std::vector<Span> split_pieces(size_t length, const std::vector<Span>& matches, SplitBehavior behavior,
                               bool invert);

}  // namespace skim::tok
