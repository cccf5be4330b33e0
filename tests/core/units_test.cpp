#include <gtest/gtest.h>

#include <cmath>

#include "cephalo/core/units.hpp"

namespace cephalo {
namespace {

TEST(Units, ParsesBinaryAndDecimalBytes) {
  EXPECT_DOUBLE_EQ(*parse_quantity("16GiB", Quantity::Bytes), 16.0 * 1024 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_quantity("22.5GB", Quantity::Bytes), 22.5e9);
  EXPECT_DOUBLE_EQ(*parse_quantity("512 MiB", Quantity::Bytes), 512.0 * 1024 * 1024);
  EXPECT_DOUBLE_EQ(*parse_quantity("1024", Quantity::Bytes), 1024.0);
}

TEST(Units, ParsesTimes) {
  EXPECT_DOUBLE_EQ(*parse_quantity("5us", Quantity::Seconds), 5e-6);
  EXPECT_DOUBLE_EQ(*parse_quantity("1.2ms", Quantity::Seconds), 1.2e-3);
  EXPECT_DOUBLE_EQ(*parse_quantity("3ns", Quantity::Seconds), 3e-9);
  EXPECT_DOUBLE_EQ(*parse_quantity("2s", Quantity::Seconds), 2.0);
}

TEST(Units, ParsesBandwidthInBytesAndBits) {
  EXPECT_DOUBLE_EQ(*parse_quantity("600GB/s", Quantity::Bandwidth), 600e9);
  EXPECT_DOUBLE_EQ(*parse_quantity("25Gbit/s", Quantity::Bandwidth), 25e9 / 8);
  EXPECT_DOUBLE_EQ(*parse_quantity("100Gbps", Quantity::Bandwidth), 100e9 / 8);
}

TEST(Units, ParsesFlopRates) {
  EXPECT_DOUBLE_EQ(*parse_quantity("312TFLOPS", Quantity::FlopRate), 312e12);
  EXPECT_DOUBLE_EQ(*parse_quantity("1.5PFLOPS", Quantity::FlopRate), 1.5e15);
  EXPECT_DOUBLE_EQ(*parse_quantity("19.5 TFLOP/s", Quantity::FlopRate), 19.5e12);
}

TEST(Units, RejectsGarbage) {
  for (const char* bad :
       {"", "GB", "16 parsecs", "16GB extra", "-5GB", "nan", "inf", "1e400", "1e31", "16gib"})
    EXPECT_FALSE(parse_quantity(bad, Quantity::Bytes).has_value()) << bad;
  EXPECT_FALSE(parse_quantity("5GB", Quantity::Seconds).has_value());
  EXPECT_FALSE(parse_quantity("600GB", Quantity::Bandwidth).has_value());
}

TEST(Units, FormatRoundTripsWithinPrintedPrecision) {
  for (double bytes : {1.0, 3000.0, 16.0 * kGiB, 22.5e9, 1.5 * 1024 * kGiB}) {
    std::string text = format_bytes(bytes);
    std::string compact;
    for (char c : text)
      if (c != ' ') compact += c;
    auto back = parse_quantity(compact, Quantity::Bytes);
    ASSERT_TRUE(back) << text;
    EXPECT_NEAR(*back, bytes, bytes * 0.006) << text;
  }
  EXPECT_EQ(format_seconds(1.2e-3), "1.2 ms");
  EXPECT_EQ(format_bandwidth(600e9), "600 GB/s");
  // Network links print in bits, as they are specified, and parse back to the same bytes/s.
  EXPECT_EQ(format_link_rate(50e9), "400 Gbit/s");
  EXPECT_EQ(format_link_rate(25e9 / 8), "25 Gbit/s");
  EXPECT_EQ(parse_quantity("400 Gbit/s", Quantity::Bandwidth).value_or(0), 50e9);
  EXPECT_EQ(format_flop_rate(312e12), "312 TFLOP/s");
  EXPECT_EQ(format_bytes(16 * kGiB), "16 GiB");
}

}  // namespace
}  // namespace cephalo
