// format_double: the shortest text that reads back as the same double, in the notation %.17g would choose;
// control_byte_at: the bytes a message must escape.
#include "conductor/util/format.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using conductor::control_byte_at;
using conductor::format_double;

// A file name from a glob may hold any byte: quoted whole, with what a terminal would act on as \xNN.
TEST(QuotedPath, WholeAndEscaped) {
  const std::string long_path = "/data/" + std::string(300, 'a') + "/shard.bin";
  EXPECT_EQ(conductor::quoted_path(long_path), "'" + long_path + "'");
  EXPECT_EQ(conductor::quoted_path("/d/caf\xC3\xA9.bin"), "'/d/caf\xC3\xA9.bin'");  // UTF-8 as written
  EXPECT_EQ(conductor::quoted_path("/d/tr\xFF\x1B[31m.bin"), "'/d/tr\\xFF\\x1B[31m.bin'");
}

TEST(PlainDecimal, ReadsWhatPeopleWriteAndNothingElse) {
  for (const auto& [text, value] : std::vector<std::pair<std::string, double>>{{"5", 5},
                                                                               {"0", 0},
                                                                               {"0.5", 0.5},
                                                                               {".5", 0.5},
                                                                               {"5.", 5},
                                                                               {"+2", 2},
                                                                               {"1e3", 1000},
                                                                               {"2.5E-1", 0.25},
                                                                               {"1e-320", 1e-320}}) {
    EXPECT_EQ(conductor::parse_plain_decimal(text), value) << text;
  }
  for (const std::string text :
       {"", " 5", "5 ", "-1", "0x10", "inf", "nan", "1e", "e3", ".", "+", "1e400", "1e-400", "5s", "1,5"}) {
    EXPECT_EQ(conductor::parse_plain_decimal(text), -1.0) << text;
  }
}

TEST(FormatDouble, ShortestTextOfDeckValues) {
  EXPECT_EQ(format_double(0.006), "0.006");  // %.17g: 0.0060000000000000001
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(format_double(0.95), "0.95");
  EXPECT_EQ(format_double(1.0), "1");
  EXPECT_EQ(format_double(12.5), "12.5");
  EXPECT_EQ(format_double(-3.25), "-3.25");
  EXPECT_EQ(format_double(0.0), "0");
  EXPECT_EQ(format_double(1e6), "1000000");
  EXPECT_EQ(format_double(1e12), "1000000000000");
  EXPECT_EQ(format_double(1e-5), "0.00001");
}

TEST(FormatDouble, ScientificOutsidePlainRange) {
  EXPECT_EQ(format_double(1e-7), "1e-07");
  EXPECT_EQ(format_double(1e17), "1e+17");
  EXPECT_EQ(format_double(-2.5e20), "-2.5e+20");
  EXPECT_EQ(format_double(std::numeric_limits<double>::denorm_min()), "5e-324");
}

TEST(FormatDouble, NonFinite) {
  EXPECT_EQ(format_double(std::numeric_limits<double>::quiet_NaN()), "nan");
  EXPECT_EQ(format_double(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_double(-std::numeric_limits<double>::infinity()), "-inf");
}

// Every finite double, whatever its magnitude, reads back bit for bit.
TEST(FormatDouble, RoundTripsEveryBitPattern) {
  std::mt19937_64 bits(12);
  std::mt19937_64 decimal(34);
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 20);
  for (int i = 0; i < 200000; ++i) {
    const double from_bits = std::bit_cast<double>(bits());
    const double plain_range = unit(decimal) * std::pow(10.0, exponent(decimal));
    for (double v : {from_bits, plain_range}) {
      if (!std::isfinite(v)) continue;
      const std::string text = format_double(v);
      ASSERT_EQ(std::bit_cast<std::uint64_t>(std::strtod(text.c_str(), nullptr)), std::bit_cast<std::uint64_t>(v))
          << text;
    }
  }
}

// Control bytes are C0 and DEL; tab and newline count (a name holding one breaks a log line), UTF-8 does not.
TEST(ControlByteAt, FindsTheFirstControlByte) {
  EXPECT_EQ(control_byte_at("plain name-1.2_x"), std::string::npos);
  EXPECT_EQ(control_byte_at("caf\xC3\xA9"), std::string::npos);
  EXPECT_EQ(control_byte_at("a\tb\nc"), 1u);
  EXPECT_EQ(control_byte_at("ab\x7f"), 2u);
  EXPECT_EQ(control_byte_at(std::string("x\0y", 3)), 1u);
  EXPECT_EQ(control_byte_at("\x1b[31m"), 0u);
}
