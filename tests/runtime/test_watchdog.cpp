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

// Who reports when several ranks fire (docs: watchdog.hpp). 4 ranks, rank 1 stopped: rank 3 (waiting on rank 2)
// fired first on its own; ranks 2 and 0, waiting on rank 1 but since later, joined. Rank 0 names the stopped rank,
// not rank 3 (which named rank 2 when rank 2's own limit came after rank 3's window).
TEST(Watchdog, TheLowestRankWaitingOnASilentPeerReports) {
  using F = Watchdog::Fired;
  EXPECT_EQ(Watchdog::reporter({{3, F{2, false}}, {2, F{1, true}}, {0, F{1, true}}}), 0);
  EXPECT_EQ(Watchdog::reporter({{3, F{2, false}}, {2, F{1, true}}}), 2);
  EXPECT_EQ(Watchdog::reporter({{3, F{2, false}}}), 3);  // alone in its window: the peer it heard nothing from
  // A collective's wait (peer -1): the lowest that fired on its own. A stopped rank resumed by mpiexec joins late
  // (rank 0 here); it does not report a second time.
  EXPECT_EQ(Watchdog::reporter({{1, F{-1, false}}, {0, F{-1, true}}}), 1);
  EXPECT_EQ(Watchdog::reporter({{1, F{-1, false}}, {0, F{-1, false}}}), 0);
  // Every peer fired (a cycle of waits): the lowest that fired on its own.
  EXPECT_EQ(Watchdog::reporter({{0, F{1, true}}, {1, F{0, false}}}), 1);
}
