// Small UTF-8 helpers for streaming text out of a token stream.
#pragma once

#include <string>
#include <string_view>

namespace skim {

// Length of the longest prefix that does not end inside an unfinished multi-byte character.
// Invalid bytes count as complete (they will be replaced when flushed).
size_t utf8_complete_prefix(std::string_view s);

// Replaces invalid UTF-8 sequences by U+FFFD.
std::string utf8_sanitize(std::string_view s);

}  // namespace skim
