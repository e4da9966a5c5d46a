// Errors for users: one exception type whose message names the file, field or flag at
// fault. The CLI prints it and exits with status 2; the server turns it into a 400.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace skim {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace skim

// Checks a condition that user input can break; the message is for the user.
#define SKIM_REQUIRE(cond, ...)          \
  do {                                   \
    if (!(cond)) ::skim::fail(__VA_ARGS__); \
  } while (0)
