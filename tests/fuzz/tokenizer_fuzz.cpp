// libFuzzer target for the tokenizer. The first byte picks the mode:
//   even: encode the remaining bytes with the demo tokenizer and check that decoding gives
//         back the text (invalid UTF-8 replaced) and that streaming agrees with it;
//   odd:  parse the remaining bytes as tokenizer.json; what parses must encode and decode
//         without crashing. Only skim::Error may come out.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

const skim::Tokenizer& demo_tokenizer() {
  static const auto tok = skim::load_tokenizer(std::filesystem::path(__FILE__).parent_path() / "../../models/demo-code-28m/tokenizer.json");
  return *tok;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "tokenizer_fuzz: %s\n", what);
    std::abort();
  }
}

std::string stream_decode(const skim::Tokenizer& tok, const std::vector<int>& ids) {
  skim::StreamDecoder stream(tok);
  std::string text;
  for (int id : ids) {
    std::string piece = stream.push(id);
    check(skim::tok::utf8_valid(piece), "stream decoder emitted invalid UTF-8");
    text += piece;
  }
  return text + stream.flush();
}

void fuzz_encode(const std::string& text, bool allow_special) {
  const skim::Tokenizer& tok = demo_tokenizer();
  const std::vector<int> ids = tok.encode(text, allow_special);
  const std::string decoded = tok.decode(ids);
  check(decoded == skim::tok::utf8_replace_invalid(text), "decode(encode(text)) != text");
  check(stream_decode(tok, ids) == decoded, "streamed text != decoded text");
  for (int id : ids) check(id >= 0 && id < tok.vocab_size(), "id out of range");
}

void fuzz_parse(const std::string& json_text) {
  std::unique_ptr<skim::Tokenizer> tok;
  try {
    tok = skim::parse_tokenizer(json_text, "fuzz.json");
  } catch (const skim::Error&) {
    return;
  }
  try {
    for (const std::string& text : {std::string("Hello world <s> 123 \xC3\xA9\xF0\x9F\x8D\x95\n\t x"), json_text.substr(0, 256)}) {
      std::vector<int> ids = tok->encode(text, true);
      std::vector<int> prompt = tok->encode_prompt(text);
      for (int id : prompt) check(id >= 0 && id < tok->vocab_size(), "id out of range");
      tok->decode(ids);
      stream_decode(*tok, ids);
      for (int id : ids) tok->is_special(id);
    }
    tok->token_id("a");
    tok->decode({-1, 0, 1, tok->vocab_size()});
  } catch (const skim::Error&) {
    // A regex in the file can hit the match limit at encode time; that is a clean error.
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_encode(rest, data[0] % 4 == 0);
  } else {
    fuzz_parse(rest);
  }
  return 0;
}
