// The per-rank driver (driver.hpp): its candidates are the arbiter's ranking as a list (first == next(now)), every
// candidate may start, and the engine run through drivers with a picker that takes a random candidate still
// finishes every list; ready and wait times are the driver's, on the caller's clock.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "conductor/sched/driver.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {

double jittered(std::mt19937& rng) { return std::uniform_real_distribution<double>(0.5, 1.5)(rng); }

}  // namespace

TEST(RankDriver, CandidatesStartWithTheArbitersChoiceAndAllMayStart) {
  for (const Hint hint : {Hint::Schedule, Hint::BF, Hint::BFW}) {
    for (const Schedule& s : {zb_h1(4, 8), one_f_one_b(4, 8), interleaved_1f1b(4, 8, 2),
                              zb_v(4, 8, uniform_cost(1, 1, 1), default_memory_limit("zb-v", 4, 8, 2))}) {
      std::mt19937 rng(7);
      ExecOptions eo;
      eo.execution = Execution::Readiness;
      eo.hint = hint;
      eo.memory_limit = default_memory_limit(s.name, s.p, s.m, s.v);
      int decisions = 0, multi = 0;
      eo.picker = [&](int, RankDriver& d, const EngineView&) {
        const std::vector<int> c = d.candidates(0);
        if (c.empty()) {
          EXPECT_EQ(d.next(0), -1);
          return -1;
        }
        EXPECT_EQ(c.front(), d.next(0));
        for (int i : c) EXPECT_TRUE(d.arbiter().is_ready(i) && d.arbiter().fits(i));
        ++decisions;
        multi += c.size() > 1 ? 1 : 0;
        return c[std::uniform_int_distribution<std::size_t>(0, c.size() - 1)(rng)];
      };
      const ExecResult r = execute(
          s, eo, [&](int, const Action&) { return jittered(rng); }, [](const Transfer&) { return 0.1; });
      EXPECT_EQ(decisions, static_cast<int>(s.num_actions())) << s.name;
      EXPECT_GT(multi, 0) << s.name << ": no decision had a choice";
      for (int rank = 0; rank < s.p; ++rank) EXPECT_EQ(r.order[rank].size(), s.ranks[rank].size());
    }
  }
}

TEST(RankDriver, StrictHasAtMostOneCandidate) {
  const Schedule s = one_f_one_b(2, 4);
  RankDriver d(s, 1, DriverOptions{Execution::Strict, Hint::Schedule, 2, 0, {}, {}});
  EXPECT_TRUE(d.candidates(0).empty());
  d.input_arrived(d.arbiter().index_of(OpKind::F, 0, 1), 1.0);
  EXPECT_TRUE(d.candidates(0).empty());  // F1 is ready, F0 is next
  const int f0 = d.arbiter().index_of(OpKind::F, 0, 0);
  d.input_arrived(f0, 2.0);
  ASSERT_EQ(d.candidates(0).size(), 1u);
  EXPECT_EQ(d.candidates(0).front(), f0);
}

TEST(RankDriver, RecordsReadyAndWaitOnTheCallersClock) {
  const Schedule s = one_f_one_b(2, 4);
  RankDriver d(s, 1, DriverOptions{Execution::Readiness, Hint::Schedule, 2, 0, {}, {}});
  d.begin(100.0);
  const int f0 = d.arbiter().index_of(OpKind::F, 0, 0);
  d.input_arrived(f0, 130.0);
  EXPECT_DOUBLE_EQ(d.ready_at(f0), 130.0);
  const OpStart a = d.start(f0, 135.0);
  EXPECT_DOUBLE_EQ(a.ready, 130.0);
  EXPECT_DOUBLE_EQ(a.wait, 35.0);  // idle since the step began
  EXPECT_TRUE(d.running());
  d.complete(f0, 140.0);
  const int b0 = d.arbiter().backward_index(0, 0);
  EXPECT_DOUBLE_EQ(d.ready_at(b0), 140.0);  // the last stage's backward needs only its F
  const OpStart b = d.start(b0, 142.0);
  EXPECT_DOUBLE_EQ(b.wait, 2.0);
  EXPECT_DOUBLE_EQ(d.first_start(), 135.0);
  d.begin(0.0);  // a new step forgets the old one
  EXPECT_FALSE(d.started_any());
  EXPECT_EQ(d.arbiter().num_done(), 0);
}

// The runtime decides at the latest event time (RankDriver::latest): arrivals, announcements and completions
// move it, starts do not (a replay knows a start only at its recorded time, after the decision), a new step
// resets it.
TEST(RankDriver, LatestIsTheLastEventToldOf) {
  const Schedule s = one_f_one_b(2, 4);
  RankDriver d(s, 1, DriverOptions{Execution::Readiness, Hint::Backfill, 2, 0, {}, {}});
  d.begin(10.0);
  EXPECT_DOUBLE_EQ(d.latest(), 10.0);
  const int f0 = d.arbiter().index_of(OpKind::F, 0, 0), f1 = d.arbiter().index_of(OpKind::F, 0, 1);
  d.announce(f1, 50.0, 12.0);
  EXPECT_DOUBLE_EQ(d.latest(), 12.0);
  d.input_arrived(f0, 20.0);
  d.start(f0, 25.0);
  EXPECT_DOUBLE_EQ(d.latest(), 20.0);
  d.input_arrived(f1, 15.0);  // a poll may stamp an event earlier than one already seen: the latest stays
  EXPECT_DOUBLE_EQ(d.latest(), 20.0);
  d.complete(f0, 30.0);
  EXPECT_DOUBLE_EQ(d.latest(), 30.0);
  d.begin(0.0);
  EXPECT_DOUBLE_EQ(d.latest(), 0.0);
}

// The runtime's estimates: the mean measured duration of the same kind and chunk; nothing measured: infinite,
// so the op is never backfilled.
TEST(MeasuredDurations, MeanPerKindAndChunkInfiniteWhenUnmeasured) {
  MeasuredDurations m;
  EXPECT_TRUE(m.empty());
  m.add(Action{OpKind::F, 0, 0}, 2.0);
  m.add(Action{OpKind::F, 3, 0}, 4.0);
  m.add(Action{OpKind::W, 1, 1}, 7.0);
  const OpEstimate e = m.estimate();
  EXPECT_DOUBLE_EQ(e(Action{OpKind::F, 9, 0}), 3.0);  // any microbatch
  EXPECT_DOUBLE_EQ(e(Action{OpKind::W, 0, 1}), 7.0);
  EXPECT_TRUE(std::isinf(e(Action{OpKind::F, 0, 1})));  // another chunk
  EXPECT_TRUE(std::isinf(e(Action{OpKind::B, 0, 0})));
  m.add(Action{OpKind::F, 0, 0}, 100.0);
  EXPECT_DOUBLE_EQ(e(Action{OpKind::F, 0, 0}), 3.0);  // an estimate is a copy: later measurements do not move it
}
