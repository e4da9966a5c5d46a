// Unicode normalization forms through ICU (libicu-dev).
#pragma once

#include <string>
#include <string_view>

namespace skim::tok {

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };

// `text` must be valid UTF-8.
std::string unicode_normalize(std::string_view text, NormalForm form);
// Full Unicode lower-casing (root locale), as Rust's str::to_lowercase.
std::string unicode_lowercase(std::string_view text);

}  // namespace skim::tok
