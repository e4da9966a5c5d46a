// The real pretrained checkpoint the golden tests use when it is there: SmolLM2-135M-Instruct,
// built (not committed) by scripts/models/smollm2.sh into models/smollm2-135m-instruct/.
// Without it the tests skip, except under CI (CI=true), where scripts/test.sh builds it and its
// absence is a failure, not a silent skip.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace skim::test {

inline std::filesystem::path smollm2_dir() {
  return std::filesystem::path(SKIM_SOURCE_DIR) / "models/smollm2-135m-instruct";
}

// The build script writes .complete last, after the whole directory is in place.
inline bool smollm2_present() { return std::filesystem::exists(smollm2_dir() / ".complete"); }

inline bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && *ci && std::strcmp(ci, "false") != 0 && std::strcmp(ci, "0") != 0;
}

}  // namespace skim::test

// Use at the top of a test body.
#define SKIM_REQUIRE_SMOLLM2()                                                                   \
  do {                                                                                           \
    if (!::skim::test::smollm2_present()) {                                                      \
      if (::skim::test::running_in_ci())                                                         \
        FAIL() << "CI: " << ::skim::test::smollm2_dir() << " is missing; "                       \
               << "bash scripts/models/smollm2.sh builds it";                                    \
      GTEST_SKIP() << ::skim::test::smollm2_dir() << " is missing (real-model golden test); "    \
                   << "bash scripts/models/smollm2.sh builds it";                                \
    }                                                                                            \
  } while (0)
