// half.hpp's fp32 <-> bf16 / fp16 conversions, bit for bit: exact values, NaN, every pattern.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "half.hpp"

using namespace cephalo::backend;

namespace {

float bits_to_float(std::uint32_t u) { return std::bit_cast<float>(u); }

// ---------------------------------------------------------------------------------------------
// half.hpp

TEST(HalfConversion, Bf16ExactValues) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);   // 1.0f = 0x3F800000, the top half
  EXPECT_EQ(float_to_bf16(-2.5f), 0xC020);  // -2.5f = 0xC0200000
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);  // sign kept
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC020), -2.5f);
  // Largest finite bf16 0x7F7F = (2 - 2^-7) * 2^127; it survives the round trip.
  EXPECT_EQ(bf16_to_float(0x7F7F), bits_to_float(0x7F7F0000u));
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7F7F0000u)), 0x7F7F);
  // FLT_MAX (0x7F7FFFFF) is above bf16 max + half an ulp (0x7F7F8000): rounds to inf.
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  // Smallest subnormal bf16 0x0001 = 2^-133 = fp32 bits 0x00010000.
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(float_to_bf16(std::ldexp(1.0f, -133)), 0x0001);
  // Ties to even: 0x3F808000 = 1 + 2^-8 is halfway between 0x3F80 (even) and 0x3F81;
  // 0x3F818000 halfway between 0x3F81 and 0x3F82 (even); just above a tie rounds up.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F808000u)), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F818000u)), 0x3F82);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F808001u)), 0x3F81);
  EXPECT_EQ(float_to_bf16(bits_to_float(0x3F807FFFu)), 0x3F80);
}

TEST(HalfConversion, Bf16NaNStaysNaN) {
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7FC00000u)), 0x7FC0);  // quiet NaN
  // A NaN whose payload is only in the dropped low bits would truncate to inf (0x7F80); the
  // quiet bit keeps it a NaN: 0x7F80 | 0x0040.
  EXPECT_EQ(float_to_bf16(bits_to_float(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_bf16(bits_to_float(0xFF800001u)), 0xFFC0);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7F81)));
}

TEST(HalfConversion, F16ExactValues) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3C00);   // exponent 15 = 01111, mantissa 0
  EXPECT_EQ(float_to_f16(-2.5f), 0xC100);  // -1.25 * 2^1: sign 1, exponent 16 = 10000, .01
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(f16_to_float(0xC100), -2.5f);
  // Largest finite fp16 0x7BFF = 65504.
  EXPECT_EQ(f16_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7BFF);
  // 65520 is halfway between 65504 (odd mantissa 0x3FF) and 2^16: the even side is inf.
  EXPECT_EQ(float_to_f16(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_f16(1e5f), 0x7C00);
  EXPECT_EQ(float_to_f16(-1e5f), 0xFC00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::max()), 0x7C00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7C00);
  // Subnormals: 0x0001 = 2^-24, 0x03FF = 1023 * 2^-24, 0x0400 = 2^-14 (smallest normal).
  EXPECT_EQ(f16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x03FF), 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_f16(1023.0f * std::ldexp(1.0f, -24)), 0x03FF);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(float_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
  // 2^-25 is halfway between 0 (even) and 2^-24; 1.5 * 2^-25 is above it; 3 * 2^-25 =
  // 1.5 * 2^-24 is halfway between 0x0001 and 0x0002 (even); 2^-26 is below half.
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_f16(1.5f * std::ldexp(1.0f, -25)), 0x0001);
  EXPECT_EQ(float_to_f16(3.0f * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -26)), 0x0000);
  // Largest subnormal + half an ulp (1023.5 * 2^-24) ties to the even 0x0400 = 2^-14.
  EXPECT_EQ(float_to_f16(1023.5f * std::ldexp(1.0f, -24)), 0x0400);
  // Normal ties: 1 + 2^-11 between 0x3C00 (even) and 0x3C01; 1 + 3 * 2^-11 between 0x3C01
  // and 0x3C02 (even).
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
}

TEST(HalfConversion, F16NaNStaysNaN) {
  EXPECT_EQ(float_to_f16(bits_to_float(0x7FC00000u)), 0x7E00);
  // Payload only in the 13 dropped bits: quieted, still a NaN (0x7C00 would be inf).
  EXPECT_EQ(float_to_f16(bits_to_float(0x7F800001u)), 0x7E00);
  EXPECT_EQ(float_to_f16(bits_to_float(0xFF800001u)), 0xFE00);
  EXPECT_TRUE(std::isnan(f16_to_float(0x7C01)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7E00)));
  EXPECT_EQ(f16_to_float(0x7C00), std::numeric_limits<float>::infinity());
}

// Every 16-bit pattern that is not a NaN survives a round trip through fp32 (fp32 holds both
// formats exactly), and widening is monotonic over the positive finite patterns.
TEST(HalfConversion, EveryPatternRoundTrips) {
  int checked = 0;
  for (std::uint32_t u = 0; u < 0x10000u; ++u) {
    const auto h = static_cast<std::uint16_t>(u);
    const float b = bf16_to_float(h), f = f16_to_float(h);
    if (!std::isnan(b)) {
      ASSERT_EQ(float_to_bf16(b), h) << std::hex << u;
      ++checked;
    }
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_f16(f), h) << std::hex << u;
      ++checked;
    }
    if (u > 0 && u <= 0x7BFFu) {
      ASSERT_LT(f16_to_float(static_cast<std::uint16_t>(u - 1)), f) << std::hex << u;
    }
  }
  // All but the NaNs (all-ones exponent, nonzero mantissa): 2 x 127 in bf16, 2 x 1023 in fp16.
  EXPECT_EQ(checked, 2 * 65536 - 254 - 2046);
}

}  // namespace
