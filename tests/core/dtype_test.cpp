#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace skim {

TEST(DType, Bf16RoundTripIsExactForBf16Values) {
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> bits(0, 0xffff);
  for (int i = 0; i < 10000; ++i) {
    uint16_t h = uint16_t(bits(rng));
    float f = bf16_to_f32(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_bf16(f), h);
  }
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), f32_to_bf16(1.0f));        // tie, even stays
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), f32_to_bf16(1.0f + 4.0f / 256));  // tie, rounds up
}

TEST(DType, F16RoundTripIsExactForF16Values) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(uint16_t(h));
    if (std::isnan(f)) continue;
    EXPECT_EQ(f32_to_f16(f), h) << h;
  }
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
}

}  // namespace skim
