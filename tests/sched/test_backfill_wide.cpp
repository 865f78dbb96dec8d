// The backfilling property over the wide grid (label slow): noise-free, with exact estimates, readiness
// with Hint::Backfill is never slower than strict execution of the same list, for every generator, p in {4, 8,
// 16, 32, 64}, m in {p, 2p, 4p} and the four cost shapes (uniform, W < F, comm = F, a heavy last stage). The fast
// p in {2, 4, 8} part runs in the unit suite (test_backfill.cpp).
#include <gtest/gtest.h>

#include <string>

#include "backfill_cases.hpp"

using namespace conductor::sched;

class BackfillWide : public ::testing::TestWithParam<int> {};

TEST_P(BackfillWide, NeverSlowerThanStrictWithoutNoise) {
  const int p = GetParam();
  const int cases = backfill_cases::for_each_noise_free_case(
      p, [&](const std::string& kind, int m, const backfill_cases::Shape& shape, double strict, double backfill) {
        EXPECT_LE(backfill, strict + 1e-9 * strict) << kind << " p=" << p << " m=" << m << " " << shape.name
                                                    << ": backfill " << backfill << " vs strict " << strict;
      });
  // Every generator accepts m = p, 2p and 4p at these depths (interleaved included: m is a multiple of p), so
  // the grid is complete: 10 generators x 3 m x 4 shapes, less any the generators refuse.
  EXPECT_GE(cases, 100) << "p=" << p;
}

INSTANTIATE_TEST_SUITE_P(Depths, BackfillWide, ::testing::Values(4, 8, 16, 32, 64),
                         [](const ::testing::TestParamInfo<int>& info) {
                           std::string name = std::to_string(info.param);
                           name.insert(name.begin(), 'p');
                           return name;
                         });
