// GPT-2's reversible byte <-> printable character mapping used by byte-level BPE vocabularies
// ("Ġ" is the space byte).
#pragma once

#include <string>
#include <string_view>

namespace skim::tok {

// The UTF-8 of the character standing for `byte`.
const std::string& byte_level_char(unsigned char byte);
// Maps each character of a vocabulary string back to its byte; false when one is not part of
// the mapping (an added token such as "<|im start|>" with a real space).
bool byte_level_to_bytes(std::string_view token, std::string& bytes);

}  // namespace skim::tok
