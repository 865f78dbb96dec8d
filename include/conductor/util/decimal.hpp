#pragma once

#include <algorithm>

namespace conductor {

// A decimal number read digit by digit saturates at kDecimalCap: larger than any stage, chunk or microbatch count
// a deck allows, so a huge number in a schedule file fails its range check with its own message instead of
// overflowing.
constexpr long long kDecimalCap = 1LL << 30;

// `value` with the digit `c` appended, saturating at kDecimalCap.
constexpr long long append_digit(long long value, char c) { return std::min(kDecimalCap, value * 10 + (c - '0')); }

}  // namespace conductor
