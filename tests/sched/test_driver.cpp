// The per-rank driver (driver.hpp): its candidates are the arbiter's ranking as a list (first == next(now)), every
// candidate may start, and the engine run through drivers with a picker that takes a random candidate still
// finishes every list; ready and wait times are the driver's, on the caller's clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "conductor/sched/driver.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {

double jittered(std::mt19937& rng) { return std::uniform_real_distribution<double>(0.5, 1.5)(rng); }

DriverOptions options(Execution execution, Hint hint, double memory_limit = 2) {
  DriverOptions o;
  o.execution = execution;
  o.hint = hint;
  o.memory_limit = memory_limit;
  return o;
}

}  // namespace

TEST(RankDriver, CandidatesStartWithTheArbitersChoiceAndAllMayStart) {
  for (const Hint hint : {Hint::Schedule, Hint::BF, Hint::BFW, Hint::Critical}) {
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

// Backfilling's next() selects from its ranked buckets without listing (driver.hpp); it must be exactly the
// first of candidates(), which ranks every feasible op. Estimates that differ per microbatch (many buckets),
// spread and late delays, a memory-bound V placement, and a picker that starts any candidate (not only the
// first) exercise every path.
TEST(RankDriver, BackfillNextIsTheFirstCandidate) {
  for (const double spread : {0.0, 0.2, 0.8}) {
    for (const Schedule& s : {zb_h1(4, 12), one_f_one_b(4, 8), generate("zb-2p", 4, 8, 1, uniform_cost(1, 1, 1)),
                              zb_v(4, 8, uniform_cost(1, 1, 1), default_memory_limit("zb-v", 4, 8, 2))}) {
      std::mt19937 rng(11);
      ExecOptions eo;
      eo.execution = Execution::Readiness;
      eo.hint = Hint::Backfill;
      eo.memory_limit = default_memory_limit(s.name, s.p, s.m, s.v);
      eo.estimate = [](int rank, const Action& a) {
        return a.kind == OpKind::F ? 1.0 : 0.3 + 0.4 * ((a.microbatch + rank) % 4) + 0.1 * a.chunk;
      };
      eo.comm_estimate = 0.1;
      eo.spread = spread;
      eo.late_delay = spread > 0 ? 0.0 : 0.7;
      int compared = 0, backfilled = 0;
      eo.picker = [&](int, RankDriver& d, const EngineView& view) {
        const std::vector<int> c = d.candidates(view.now);
        EXPECT_EQ(d.next(view.now), c.empty() ? -1 : c.front()) << s.name << " at " << view.now;
        ++compared;
        if (c.empty()) return -1;
        backfilled += c.front() != d.arbiter().next_in_list() ? 1 : 0;
        return std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? c.back() : c.front();
      };
      execute(
          s, eo, [&](int, const Action&) { return jittered(rng); }, [](const Transfer&) { return 0.1; });
      EXPECT_GT(compared, static_cast<int>(s.num_actions())) << s.name;
      if (s.name != "1f1b") {  // 1F1B has nothing to backfill
        EXPECT_GT(backfilled, 0) << s.name << ": nothing backfilled, the comparison proves little";
      }
    }
  }
}

TEST(RankDriver, StrictHasAtMostOneCandidate) {
  const Schedule s = one_f_one_b(2, 4);
  RankDriver d(s, 1, options(Execution::Strict, Hint::Schedule));
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
  RankDriver d(s, 1, options(Execution::Readiness, Hint::Schedule));
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

// An F held back by the memory limit is startable (the trace's ready_ns) only once a completion frees its memory:
// the analysis counted that idle time as "ready but not picked" when ready_ns was the inputs' time alone.
TEST(RankDriver, StartableOnceInputsAreInAndMemoryFits) {
  const Schedule s = one_f_one_b(2, 4);                               // rank 0: F0 F1 B0 F2 B1 F3 B2 B3
  RankDriver d(s, 0, options(Execution::Strict, Hint::Schedule, 2));  // a B frees its F's whole M_F
  d.begin(10.0);
  const int f0 = d.arbiter().index_of(OpKind::F, 0, 0), f1 = d.arbiter().index_of(OpKind::F, 0, 1);
  const int f2 = d.arbiter().index_of(OpKind::F, 0, 2), b0 = d.arbiter().backward_index(0, 0);
  EXPECT_DOUBLE_EQ(d.startable_at(f1), 10.0);  // the first stage's forwards need no input; two fit
  EXPECT_DOUBLE_EQ(d.start(f0, 10.0).ready, 10.0);
  d.complete(f0, 11.0);
  EXPECT_DOUBLE_EQ(d.start(f1, 11.0).ready, 10.0);
  d.complete(f1, 12.0);
  EXPECT_DOUBLE_EQ(d.ready_at(f2), 10.0);  // its inputs were in from the start...
  EXPECT_FALSE(d.arbiter().fits(f2));      // ...but two M_F are held
  EXPECT_TRUE(std::isinf(d.startable_at(f2)));
  d.input_arrived(b0, 15.0);
  EXPECT_DOUBLE_EQ(d.start(b0, 15.0).ready, 15.0);
  d.complete(b0, 17.0);  // frees F0's memory
  EXPECT_DOUBLE_EQ(d.startable_at(f2), 17.0);
  EXPECT_DOUBLE_EQ(d.start(f2, 17.0).ready, 17.0);
  d.begin(0.0);  // a new step: every F fits again from its begin
  EXPECT_DOUBLE_EQ(d.startable_at(f0), 0.0);
  EXPECT_TRUE(std::isinf(d.startable_at(f2)));
}

// The runtime decides at the latest event time (RankDriver::latest): arrivals, announcements and completions
// move it, starts do not (a replay knows a start only at its recorded time, after the decision), a new step
// resets it.
TEST(RankDriver, LatestIsTheLastEventToldOf) {
  const Schedule s = one_f_one_b(2, 4);
  RankDriver d(s, 1, options(Execution::Readiness, Hint::Backfill));
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

namespace {
// ranking() switches backfill, and only backfill, to critical from kWideSpread on in `spread` (a member of
// DriverOptions: the spread of op times or of input arrivals).
void expect_switch_at_wide(double DriverOptions::*spread) {
  DriverOptions o = options(Execution::Readiness, Hint::Backfill);
  o.*spread = kWideSpread;
  EXPECT_EQ(ranking(o), Hint::Critical);
  o.*spread = std::nextafter(kWideSpread, 0.0);
  EXPECT_EQ(ranking(o), Hint::Backfill);
  o.wide_spread = 0;  // noise-free keeps backfilling at any switch; any spread switches at 0
  o.*spread = 0;
  EXPECT_EQ(ranking(o), Hint::Backfill);
  o.*spread = 1e-9;
  EXPECT_EQ(ranking(o), Hint::Critical);
  o.hint = Hint::BFW;
  o.*spread = 1.0;
  EXPECT_EQ(ranking(o), Hint::BFW);
}
}  // namespace

// The arrival spread (congestion's) switches backfill to critical from kWideSpread on, as the op spread does.
TEST(RankDriver, BackfillRanksAsCriticalUnderAWideArrivalSpread) {
  expect_switch_at_wide(&DriverOptions::arrival_spread);
}

// Backfilling under variability: with exact estimates an op must end by the announced arrival; with spread
// (log-normal sigma) it must end before the input with probability 0.4 (sigma >= 0.5) or 0.6 (small jitter), i.e.
// its estimate times exp(sigma sqrt(2) z_P) fits; a late input stops backfilling unless transfers are known to come
// late by late_delay (congestion): then ops that end by expected + late_delay may start.
namespace {

// Rank 1 of ZB-H1 p=2 m=4 after its first F and B: the list's next op is F1 (waiting for rank 0) and W0 is
// ready (local work, estimate `w`). Returns whether W0 may start at `now` given F1's input announced at t=10
// for t=12 (expected).
bool w_may_start(double w, double now, double spread, double late_delay) {
  const CostModel cost = uniform_cost(1, 1, 1, 0);
  const Schedule s = generate("zb-h1", 2, 4, 1, cost);
  DriverOptions o = options(Execution::Readiness, Hint::Backfill, 0);
  o.estimate = [w](const Action& a) { return a.kind == OpKind::W ? w : 1.0; };
  o.spread = spread;
  o.late_delay = late_delay;
  RankDriver d(s, 1, o);
  const Arbiter& a = d.arbiter();
  const int f0 = a.index_of(OpKind::F, 0, 0), b0 = a.backward_index(0, 0), w0 = a.index_of(OpKind::W, 0, 0);
  const int f1 = a.index_of(OpKind::F, 0, 1);
  d.input_arrived(f0, 0.0);
  d.start(f0, 0.0);
  d.complete(f0, 1.0);
  d.start(b0, 1.0);
  d.complete(b0, 2.0);
  EXPECT_EQ(a.next_in_list(), std::min(f1, w0)) << "the test expects F1 or W0 next in rank 1's list";
  if (a.next_in_list() == w0) return true;  // W0 is the list's own next op: no backfilling involved
  d.announce(f1, 12.0, 10.0);
  const auto& c = d.candidates(now);
  return std::find(c.begin(), c.end(), w0) != c.end();
}

}  // namespace

// Backfill under a wide spread is critical with the configured memory limit (not the list's peak): the same
// picks, op for op, on lists whose ranks hold several chunks too; below kWideSpread it stays backfill.
TEST(RankDriver, BackfillRanksAsCriticalUnderAWideSpread) {
  expect_switch_at_wide(&DriverOptions::spread);
  const CostModel cost = uniform_cost(1, 1, 1, 0.1);
  for (const Schedule& s : {zb_h1(4, 8), one_f_one_b(4, 8), interleaved_1f1b(4, 8, 2),
                            zb_v(4, 8, cost, default_memory_limit("zb-v", 4, 8, 2))}) {
    const auto run = [&](Hint hint, double spread) {
      std::mt19937 rng(3);
      ExecOptions eo;
      eo.execution = Execution::Readiness;
      eo.hint = hint;
      eo.spread = spread;
      eo.estimate = [](int, const Action&) { return 1.0; };
      eo.memory_limit = default_memory_limit(s.name, s.p, s.m, s.v);
      return execute(
          s, eo, [&](int, const Action&) { return std::exp(std::normal_distribution<double>(0, 1)(rng)); },
          [](const Transfer&) { return 0.1; });
    };
    const ExecResult wide = run(Hint::Backfill, 1.0), critical = run(Hint::Critical, 0.0);
    EXPECT_EQ(wide.order, critical.order) << s.name;
    EXPECT_EQ(wide.makespan(), critical.makespan()) << s.name;
    EXPECT_NE(run(Hint::Backfill, 0.4).order, wide.order) << s.name << ": the switch changed nothing";
  }
}

TEST(RankDriver, BackfillFitsOnEstimateOrWithProbabilityUnderSpread) {
  // Exact estimates: W0 (estimate 2) fits the gap from 10 to 12, one of 2.5 does not.
  EXPECT_TRUE(w_may_start(2.0, 10.0, 0, 0));
  EXPECT_FALSE(w_may_start(2.5, 10.0, 0, 0));
  // A spread of 0.45: with probability 0.6, 1.4 x exp(sqrt(2) x 0.45 x 0.2533) = 1.58 fits, 1.8 (2.03) does not.
  EXPECT_TRUE(w_may_start(1.4, 10.0, 0.45, 0));
  EXPECT_FALSE(w_may_start(1.8, 10.0, 0.45, 0));
  // Heavy (0.55, below the switch): with probability 0.4, 2.5 x exp(sqrt(2) x 0.55 x -0.2533) = 2.05 does not fit,
  // 2.4 (1.97) does.
  EXPECT_TRUE(w_may_start(2.4, 10.0, 0.55, 0));
  EXPECT_FALSE(w_may_start(2.5, 10.0, 0.55, 0));
  // From kWideSpread (0.6) on the driver ranks as critical, greedy: W0 is ready, so it may start, where just below
  // it (3 x exp(sqrt(2) x 0.59 x -0.2533) = 2.43) it does not fit.
  EXPECT_FALSE(w_may_start(3.0, 10.0, 0.59, 0));
  EXPECT_TRUE(w_may_start(3.0, 10.0, kWideSpread, 0));
  // Small jitter (spread 0.1): with probability 0.6, 1.92 x exp(sqrt(2) x 0.1 x 0.2533) = 1.990 fits, 1.95 (2.021)
  // does not, nor does the exact fit of 2 that the means alone would take.
  EXPECT_TRUE(w_may_start(1.92, 10.0, 0.1, 0));
  EXPECT_FALSE(w_may_start(1.95, 10.0, 0.1, 0));
  EXPECT_FALSE(w_may_start(2.0, 10.0, 0.1, 0));
}

TEST(RankDriver, LateInputStopsBackfillingUnlessTransfersComeLateByAKnownDelay) {
  // At 13 F1's input (expected at 12) is late: nothing starts, however short.
  EXPECT_FALSE(w_may_start(0.1, 13.0, 0, 0));
  // Congestion delays a transfer by 4: it is expected at 16; W0 of 3 ends by then, one of 3.5 does not.
  EXPECT_TRUE(w_may_start(3.0, 13.0, 0, 4.0));
  EXPECT_FALSE(w_may_start(3.5, 13.0, 0, 4.0));
  // Later than expected + late_delay: nothing is known any more.
  EXPECT_FALSE(w_may_start(0.1, 16.5, 0, 4.0));
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

// The runtime's spread: the pooled standard deviation of log durations within each kind and chunk (one duration
// alone says nothing), the same whatever the order they were measured in.
TEST(MeasuredDurations, SpreadIsThePooledLogDeviationInAnyOrder) {
  MeasuredDurations m;
  EXPECT_EQ(m.spread(), 0.0);
  m.add(Action{OpKind::F, 0, 0}, 10.0);
  m.add(Action{OpKind::W, 0, 0}, 3.0);
  EXPECT_EQ(m.spread(), 0.0);  // no kind and chunk measured twice
  m.add(Action{OpKind::F, 1, 0}, 20.0);
  for (int mb = 0; mb < 3; ++mb) m.add(Action{OpKind::B, mb, 0}, 5.0);
  // F: logs ln 10, ln 20 (squares ln(2)^2 / 2, 1 degree); B: 5, 5, 5 (0, 2 degrees); W: one, left out.
  EXPECT_NEAR(m.spread(), std::log(2.0) / std::sqrt(6.0), 1e-12);
  const std::vector<double> d = {21.0, 19.5, 20.25, 18.0, 23.5, 20.0, 19.0};
  MeasuredDurations forward, backward;
  for (std::size_t k = 0; k < d.size(); ++k) {
    forward.add(Action{OpKind::F, static_cast<int>(k), 0}, d[k]);
    backward.add(Action{OpKind::F, static_cast<int>(k), 0}, d[d.size() - 1 - k]);
  }
  EXPECT_EQ(forward.spread(), backward.spread());
  EXPECT_GT(forward.spread(), 0.05);
}

// conductor run's spread is pooled over every step so far (carry_spread), each step's logs around that step's own
// means: a rank whose ops all slow down from one step to the next adds no spread, and steps of few ops no longer
// swing the estimate on their own.
TEST(MeasuredDurations, SpreadCarriedOverStepsAroundEachStepsMeans) {
  MeasuredDurations first, second, third;
  first.add(Action{OpKind::F, 0, 0}, 10.0);
  first.add(Action{OpKind::F, 1, 0}, 20.0);  // ln(2)^2 / 2, 1 degree
  second.add(Action{OpKind::F, 0, 0}, 40.0);
  second.add(Action{OpKind::F, 1, 0}, 40.0);  // a slower step, no spread within it: 0, 1 degree
  second.carry_spread(first);
  EXPECT_NEAR(second.spread(), std::log(2.0) / 2.0, 1e-12);  // sqrt((ln(2)^2 / 2 + 0) / 2)
  third.add(Action{OpKind::B, 0, 0}, 5.0);
  third.add(Action{OpKind::B, 1, 0}, 5.0);
  third.add(Action{OpKind::B, 2, 0}, 5.0);  // 0, 2 degrees
  third.carry_spread(second);               // what second carried, too
  EXPECT_NEAR(third.spread(), std::log(2.0) / std::sqrt(8.0), 1e-12);
  EXPECT_DOUBLE_EQ(third.estimate()(Action{OpKind::B, 9, 0}), 5.0);  // the estimates stay the step's own
  EXPECT_TRUE(std::isinf(third.estimate()(Action{OpKind::F, 0, 0})));
}

// Backfilling with the list's next op ready but local (a W): the list's next op that feeds another rank goes first
// when it is ready with only ready ops between (the ready segment's end does not move; driver.cpp, ahead_of), and
// not when an op between still waits. Rank 0 of two: its F feeds rank 1, its B and W stay on it.
TEST(RankDriver, BackfillRunsTheNextRemoteOpOfAReadySegmentFirst) {
  const Schedule s = parse_text(
      "pipeline 2\nmicrobatches 2\nvirtual 1\nplacement loop\n"
      "rank 0: 0F0 0B0 0W0 0F1 0B1 0W1\nrank 1: 0F0 0B0 0W0 0F1 0B1 0W1\n");
  RankDriver d0(s, 0, options(Execution::Readiness, Hint::Backfill, 2));
  const Arbiter& a0 = d0.arbiter();
  const int f0 = a0.index_of(OpKind::F, 0, 0), b0 = a0.backward_index(0, 0);
  const int w0 = a0.index_of(OpKind::W, 0, 0), f1 = a0.index_of(OpKind::F, 0, 1);
  // Rank 0 runs F0, gets B0's gradient, runs B0: W0 is the list's next op and F1 (no input needed) is ready.
  const auto f0_then_b0 = [&](RankDriver& d) {
    d.start(f0, 0.0);
    d.complete(f0, 1.0);
    d.input_arrived(b0, 2.0);
    ASSERT_EQ(d.next(2.0), b0);
    d.start(b0, 2.0);
    d.complete(b0, 3.0);
  };
  f0_then_b0(d0);
  ASSERT_EQ(a0.next_in_list(), w0);
  EXPECT_EQ(d0.next(3.0), f1);  // W0 and F1 ready: F1 (to rank 1) first, W0 after it, the pair ends as late
  EXPECT_EQ(d0.candidates(3.0), std::vector<int>{f1});
  // Rank 1 of two: after B0, W0 is next; F1 between it and B1 (the next op to feed rank 0) has no input yet.
  RankDriver d1(s, 1, options(Execution::Readiness, Hint::Backfill, 2));
  const Arbiter& a1 = d1.arbiter();
  const int g0 = a1.index_of(OpKind::F, 0, 0), c0 = a1.backward_index(0, 0), v0 = a1.index_of(OpKind::W, 0, 0);
  d1.input_arrived(g0, 1.0);
  d1.start(g0, 1.0);
  d1.complete(g0, 2.0);
  d1.start(c0, 2.0);
  d1.complete(c0, 3.0);
  EXPECT_EQ(d1.next(3.0), v0);  // F1 waits for rank 0: the list's order
  d1.input_arrived(a1.index_of(OpKind::F, 0, 1), 3.5);
  EXPECT_EQ(d1.next(3.5), v0);  // F1 ready but B1 (after it) is not: still the list's order
  // Any other hint keeps its own ranking (the rule is backfilling's).
  RankDriver s0(s, 0, options(Execution::Strict, Hint::Schedule, 2));
  f0_then_b0(s0);
  EXPECT_EQ(s0.next(3.0), w0);
}
