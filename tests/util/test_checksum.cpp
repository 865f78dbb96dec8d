// util::crc32: zlib's CRC-32, whole or in pieces (a data file is checksummed a megabyte at a time).
#include "conductor/util/checksum.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

using conductor::util::crc32;

TEST(Crc32, KnownValues) {
  const std::string check = "123456789";  // the CRC-32 check value of the standard
  EXPECT_EQ(crc32(check.data(), check.size()), 0xcbf43926u);
  EXPECT_EQ(crc32(check.data(), 0), 0u);
}

TEST(Crc32, ChainedPiecesGiveTheWholesCrc) {
  std::vector<unsigned char> bytes(100'003);
  std::uint32_t x = 12345;
  for (auto& b : bytes) b = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  const std::uint32_t whole = crc32(bytes.data(), bytes.size());
  for (const std::size_t half : {std::size_t{0}, std::size_t{1}, bytes.size() / 2, bytes.size()}) {
    const std::uint32_t first = crc32(bytes.data(), half);
    EXPECT_EQ(crc32(bytes.data() + half, bytes.size() - half, first), whole) << "split at " << half;
  }
  // An empty piece leaves a CRC as it was.
  EXPECT_EQ(crc32(bytes.data(), 0, whole), whole);
}
