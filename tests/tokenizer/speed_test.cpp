// Encoding must stay fast on long inputs: per-word caching and a heap-driven merge loop.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "fixture_paths.h"
#include "tokenizer/tokenizer.h"

namespace skim {
namespace {

double seconds_to_encode(const Tokenizer& tok, const std::string& text, size_t* tokens) {
  const auto start = std::chrono::steady_clock::now();
  *tokens = tok.encode(text).size();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

TEST(TokenizerSpeed, HundredKilobytesOfPythonWellUnderASecond) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const std::string text = test::read_text_file(test::repo_path("data/heldout-python/email.py.txt")).substr(0, 100'000);
  size_t tokens = 0;
  const double seconds = seconds_to_encode(*tok, text, &tokens);  // cold cache
  EXPECT_GT(tokens, 10'000u);
  EXPECT_LT(seconds, 10.0) << tokens << " tokens";
  EXPECT_EQ(tok->decode(tok->encode(text)), text);
}

TEST(TokenizerSpeed, LongWordsAreNotQuadratic) {
  // Llama 2 style BPE has no pre-tokenizer: the whole text is one word.
  auto tok = load_tokenizer(test::tokenizer_fixture("llama2-style.tokenizer.json"));
  const std::string text = test::read_text_file(test::repo_path("data/heldout-python/http.py.txt")).substr(0, 100'000);
  size_t tokens = 0;
  EXPECT_LT(seconds_to_encode(*tok, text, &tokens), 10.0);  // catches quadratic blowups only; speed is benchmarked
  EXPECT_GT(tokens, 10'000u);
  auto demo = load_tokenizer(test::demo_tokenizer_path());
  EXPECT_LT(seconds_to_encode(*demo, std::string(100'000, 'a'), &tokens), 10.0);  // catches quadratic blowups only; speed is benchmarked
  EXPECT_LT(seconds_to_encode(*demo, std::string(100'000, ' '), &tokens), 10.0);  // catches quadratic blowups only; speed is benchmarked
}

TEST(TokenizerSpeed, ConcurrentEncodesAgree) {
  auto tok = load_tokenizer(test::demo_tokenizer_path());
  const std::string text = test::read_text_file(test::repo_path("data/heldout-python/http.py.txt")).substr(0, 30'000);
  const std::vector<int> expected = load_tokenizer(test::demo_tokenizer_path())->encode(text);
  std::vector<std::vector<int>> results(4);
  std::vector<std::thread> threads;
  for (auto& result : results) threads.emplace_back([&] { result = tok->encode(text); });
  for (auto& t : threads) t.join();
  for (const auto& result : results) EXPECT_EQ(result, expected);
}

}  // namespace
}  // namespace skim
