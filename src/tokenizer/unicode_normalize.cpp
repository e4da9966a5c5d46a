#include "tokenizer/unicode_normalize.h"

#ifdef SKIM_HAVE_ICU
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#endif

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace skim::tok {

namespace {

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

#ifdef SKIM_HAVE_ICU
void check(UErrorCode status, const char* what) {
  if (U_FAILURE(status)) skim::fail("tokenizer: ICU {} failed: {}", what, u_errorName(status));
}

std::vector<UChar> to_utf16(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  u_strFromUTF8(nullptr, 0, &length, text.data(), static_cast<int32_t>(text.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check(status, "UTF-8 decoding");
  std::vector<UChar> out(length + 1);
  u_strFromUTF8(out.data(), static_cast<int32_t>(out.size()), &length, text.data(),
                static_cast<int32_t>(text.size()), &status);
  check(status, "UTF-8 decoding");
  out.resize(length);
  return out;
}

std::string to_utf8(const std::vector<UChar>& text) {
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = 0;
  u_strToUTF8(nullptr, 0, &length, text.data(), static_cast<int32_t>(text.size()), &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check(status, "UTF-8 encoding");
  std::string out(length + 1, '\0');
  u_strToUTF8(out.data(), static_cast<int32_t>(out.size()), &length, text.data(),
              static_cast<int32_t>(text.size()), &status);
  check(status, "UTF-8 encoding");
  out.resize(length);
  return out;
}

const UNormalizer2* instance(NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const UNormalizer2* n = nullptr;
  switch (form) {
    case NormalForm::kNFC: n = unorm2_getNFCInstance(&status); break;
    case NormalForm::kNFD: n = unorm2_getNFDInstance(&status); break;
    case NormalForm::kNFKC: n = unorm2_getNFKCInstance(&status); break;
    case NormalForm::kNFKD: n = unorm2_getNFKDInstance(&status); break;
  }
  check(status, "normalizer setup");
  return n;
}

}  // namespace

std::string unicode_normalize(std::string_view text, NormalForm form) {
  if (is_ascii(text)) return std::string(text);  // ASCII is invariant under all four forms
  const UNormalizer2* normalizer = instance(form);
  std::vector<UChar> source = to_utf16(text);
  UErrorCode status = U_ZERO_ERROR;
  if (unorm2_isNormalized(normalizer, source.data(), static_cast<int32_t>(source.size()), &status) &&
      U_SUCCESS(status)) {
    return std::string(text);
  }
  status = U_ZERO_ERROR;
  int32_t length = unorm2_normalize(normalizer, source.data(), static_cast<int32_t>(source.size()),
                                    nullptr, 0, &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check(status, "normalization");
  std::vector<UChar> result(length + 1);
  length = unorm2_normalize(normalizer, source.data(), static_cast<int32_t>(source.size()), result.data(),
                            static_cast<int32_t>(result.size()), &status);
  check(status, "normalization");
  result.resize(length);
  return to_utf8(result);
}

std::string unicode_lowercase(std::string_view text) {
  if (is_ascii(text)) {
    std::string out(text);
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return out;
  }
  std::vector<UChar> source = to_utf16(text);
  UErrorCode status = U_ZERO_ERROR;
  int32_t length = u_strToLower(nullptr, 0, source.data(), static_cast<int32_t>(source.size()), "", &status);
  if (status == U_BUFFER_OVERFLOW_ERROR) status = U_ZERO_ERROR;
  check(status, "lower-casing");
  std::vector<UChar> result(length + 1);
  length = u_strToLower(result.data(), static_cast<int32_t>(result.size()), source.data(),
                        static_cast<int32_t>(source.size()), "", &status);
  check(status, "lower-casing");
  result.resize(length);
  return to_utf8(result);
}

#else  // built with -DSKIM_ICU=OFF: ASCII only, which every normal form leaves as it is

}  // namespace

std::string unicode_normalize(std::string_view text, NormalForm) {
  SKIM_REQUIRE(is_ascii(text), "tokenizer: normalizing non-ASCII text needs ICU, and this skim was "
                               "built without it (-DSKIM_ICU=OFF)");
  return std::string(text);
}

std::string unicode_lowercase(std::string_view text) {
  SKIM_REQUIRE(is_ascii(text), "tokenizer: lower-casing non-ASCII text needs ICU, and this skim was "
                               "built without it (-DSKIM_ICU=OFF)");
  std::string out(text);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}
#endif

}  // namespace skim::tok
