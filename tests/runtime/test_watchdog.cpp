// The watchdog's limit (runtime/watchdog.hpp): runtime.watchdog_s, bounded once steps have run by
// runtime.watchdog_steps x the slowest step so far, never below 30 s nor above the configured limit.
#include <gtest/gtest.h>

#include "conductor/runtime/watchdog.hpp"

using conductor::runtime::Watchdog;

TEST(Watchdog, BoundedByTheSlowestStepWithinItsFloorAndTheConfiguredLimit) {
  Watchdog w(300, 0);
  EXPECT_DOUBLE_EQ(w.seconds(), 300);  // no step yet: start-up may take long
  w.bound_by_steps(0.5, 10);
  EXPECT_DOUBLE_EQ(w.seconds(), 30);  // the floor
  EXPECT_EQ(w.limit_ns(), 30'000'000'000);
  w.bound_by_steps(7, 10);
  EXPECT_DOUBLE_EQ(w.seconds(), 70);
  w.bound_by_steps(100, 10);
  EXPECT_DOUBLE_EQ(w.seconds(), 300);  // never above runtime.watchdog_s
  Watchdog off(300, 0);
  off.bound_by_steps(0.5, 0);  // runtime.watchdog_steps = 0: the configured limit alone
  EXPECT_DOUBLE_EQ(off.seconds(), 300);
  Watchdog tight(3, 0);
  tight.bound_by_steps(0.5, 10);
  EXPECT_DOUBLE_EQ(tight.seconds(), 3);  // a limit below the floor stays
  Watchdog never(0, 0);
  never.bound_by_steps(0.5, 10);
  EXPECT_EQ(never.limit_ns(), 0);  // 0: never fires
  EXPECT_FALSE(never.expired(0, 1'000'000'000'000));
}
