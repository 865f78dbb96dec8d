// summarize_step: THE per-step definition (docs/trace.md), checked against hand-computed figures.
#include <gtest/gtest.h>

#include <cmath>

#include "conductor/trace/summary.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;
using namespace conductor::trace;

namespace {
OpEvent op(int step, int rank, EventKind kind, std::int64_t start, std::int64_t end, int mb = 0) {
  OpEvent e;
  e.step = step;
  e.rank = rank;
  e.stage = rank;
  e.kind = kind;
  e.microbatch = mb;
  e.ready_ns = start;
  e.start_ns = start;
  e.end_ns = end;
  return e;
}
}  // namespace

TEST(Summary, HandComputedTwoRanks) {
  // rank 0: F [100,200) B [300,450) W [450,500)   busy 100+150+50 = 300
  // rank 1: F [200,300) BW [300,400)             busy 100+100    = 200
  // a SEND [500,900) is not compute and must not stretch the makespan or count as busy.
  std::vector<OpEvent> ev = {op(3, 0, EventKind::F, 100, 200),  op(3, 0, EventKind::B, 300, 450),
                             op(3, 0, EventKind::W, 450, 500),  op(3, 1, EventKind::F, 200, 300),
                             op(3, 1, EventKind::BW, 300, 400), op(3, 0, EventKind::SEND, 500, 900),
                             op(4, 1, EventKind::F, 0, 100000)};  // another step: ignored
  StepRecord r = summarize_step(ev, 2, 3, 8.0);
  EXPECT_EQ(r.step, 3);
  EXPECT_EQ(r.start_ns, 100);
  EXPECT_EQ(r.makespan_ns, 400);                          // 500 - 100
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 1.0 - 500.0 / 800.0);  // busy 300+200 over 2 x 400
  EXPECT_DOUBLE_EQ(r.lower_bound_ns, 300.0);
  EXPECT_DOUBLE_EQ(r.samples_per_s, 8.0 / 400e-9);
  EXPECT_TRUE(std::isnan(r.loss));
  // Per-stage: rank 0 spans [100,500) = 400 with 300 busy (0.25), rank 1 spans [200,400) = 200, all busy (0).
  EXPECT_DOUBLE_EQ(r.stage_bubble_ratio, (0.25 + 0.0) / 2);
}

TEST(Summary, HelpRowsAreTheHelpersBusyTime) {
  // Migration: rank 1 computes slices of rank 0's F [100,200) in [120,180) (a HELP_F row, peer 0); rank 1's own
  // F runs [200,300). Rank 1 is busy 60 + 100 over its span [120,300) of 180; without the HELP row it would be
  // 100 busy over [200,300).
  OpEvent help = op(0, 1, EventKind::HELP_F, 120, 180);
  help.peer = 0;
  help.migrated = 2;
  std::vector<OpEvent> ev = {op(0, 0, EventKind::F, 100, 200), help, op(0, 1, EventKind::F, 200, 300)};
  StepRecord r = summarize_step(ev, 2, 0, 1.0);
  EXPECT_EQ(r.makespan_ns, 200);
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 1.0 - 260.0 / 400.0);
  EXPECT_DOUBLE_EQ(r.lower_bound_ns, 160.0);
  EXPECT_DOUBLE_EQ(r.stage_bubble_ratio, (0.0 + (1.0 - 160.0 / 180.0)) / 2);
}

TEST(Summary, IdleRankCountsInTheDenominator) {
  // world_size 3 but rank 2 never computes: its whole makespan is bubble.
  std::vector<OpEvent> ev = {op(0, 0, EventKind::F, 0, 1000), op(0, 1, EventKind::F, 0, 1000)};
  StepRecord r = summarize_step(ev, 3, 0, 1.0);
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 1.0 - 2000.0 / 3000.0);
  // The per-stage measure has no span for rank 2, so it leaves it out; the other two never idle.
  EXPECT_DOUBLE_EQ(r.stage_bubble_ratio, 0.0);
}

TEST(Summary, StageBubbleIsTheMeanOverRanksOfIdleWithinTheirSpan) {
  // rank 0: [0,10) and [30,40): span 40, busy 20 -> 0.5; rank 1: [10,30): span 20, busy 20 -> 0;
  // rank 2: [0,10), [20,25), [35,40): span 40, busy 20 -> 0.5. Global: 1 - 60 / (3 x 40) = 0.5.
  std::vector<OpEvent> ev = {op(0, 0, EventKind::F, 0, 10),  op(0, 0, EventKind::B, 30, 40),
                             op(0, 1, EventKind::F, 10, 30), op(0, 2, EventKind::F, 0, 10),
                             op(0, 2, EventKind::W, 20, 25), op(0, 2, EventKind::B, 35, 40)};
  StepRecord r = summarize_step(ev, 3, 0, 1.0);
  EXPECT_DOUBLE_EQ(r.bubble_ratio, 0.5);
  EXPECT_DOUBLE_EQ(r.stage_bubble_ratio, (0.5 + 0.0 + 0.5) / 3);
  EXPECT_DOUBLE_EQ(stage_bubble_ratio({20, 20, 20}, {40, 20, 40}), r.stage_bubble_ratio);
  EXPECT_DOUBLE_EQ(stage_bubble_ratio({0, 5}, {0, -1}), 0.0);  // zero span counts 0; no op: left out
}

TEST(Summary, NoComputeEventThrows) {
  std::vector<OpEvent> ev = {op(0, 0, EventKind::RECV, 0, 10)};
  EXPECT_THROW(summarize_step(ev, 1, 0, 1.0), Error);
  EXPECT_THROW(summarize_step({}, 1, 0, 1.0), Error);
}

TEST(Summary, RankOutsideWorldThrows) {
  std::vector<OpEvent> ev = {op(0, 2, EventKind::F, 0, 10)};
  try {
    summarize_step(ev, 2, 0, 1.0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
}
