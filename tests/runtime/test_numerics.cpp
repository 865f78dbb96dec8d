// NonfiniteGuard's divergence warning (runtime/numerics.hpp): once, past 10x the first loss, with advice that
// fits the run's optim.grad_clip (it told a run clipping at 1 to "set optim.grad_clip").
#include <gtest/gtest.h>

#include <string>

#include "conductor/runtime/numerics.hpp"

using conductor::runtime::NonfiniteGuard;

TEST(NonfiniteGuard, DivergenceWarnsOnceWithAdviceForTheClip) {
  NonfiniteGuard clipped(0, 0);
  EXPECT_EQ(clipped.divergence(2.0, 0, 1.0), "");   // the first loss
  EXPECT_EQ(clipped.divergence(19.0, 1, 1.0), "");  // below 10x
  const std::string warning = clipped.divergence(25.0, 2, 1.0);
  EXPECT_NE(warning.find("step 3: loss 25 is above 10x the run's first loss (2)"), std::string::npos) << warning;
  EXPECT_NE(warning.find("lower optim.lr or optim.grad_clip = 1)"), std::string::npos) << warning;
  EXPECT_EQ(warning.find("set optim.grad_clip"), std::string::npos) << warning;
  EXPECT_EQ(clipped.divergence(50.0, 3, 1.0), "");  // warned once

  NonfiniteGuard unclipped(0, 0);
  unclipped.divergence(2.0, 0, 0.0);
  const std::string advice = unclipped.divergence(30.0, 1, 0.0);
  EXPECT_NE(advice.find("lower optim.lr or set optim.grad_clip, now 0: no clipping"), std::string::npos) << advice;
}
