// The runtime's driver options (runtime/executor.hpp: driver_options) tell each rank's driver what the simulator's
// drivers are told of the noise it injects (sim/simulator.cpp: the noise model's arrivals' spread and a late
// input's delay), and the previous step's measured op times where the simulator passes its cost model and noise.
#include <gtest/gtest.h>

#include "conductor/runtime/executor.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"

using namespace conductor;

namespace {

plan::Noise congestion(double prob, double delay_ms) {
  plan::Noise n;
  n.kind = {"congestion"};
  n.seed = 3;
  n.congestion_prob = prob;
  n.congestion_delay = delay_ms;
  return n;
}

sched::MeasuredDurations measured() {
  sched::MeasuredDurations m;
  for (const double d : {20.0, 22.0, 18.5}) m.add(sched::Action{sched::OpKind::F, 0, 0}, d);
  for (const double d : {21.0, 19.0}) m.add(sched::Action{sched::OpKind::B, 0, 0}, d);
  return m;
}

}  // namespace

// Backfilling: a congested input is expected congestion_delay after its announced time (without it a rank whose
// input was late stayed idle where the simulator's backfilled until then), the arrivals' spread is the noise
// model's, the op times' spread and estimates the measured ones.
TEST(DriverOptions, BackfillKnowsTheInjectedCongestionAsTheSimulatorDoes) {
  const sched::Schedule s = sched::zb_h1(2, 8);
  const sim::NoiseModel noise(s, sched::uniform_cost(20, 20, 20, 1), congestion(0.15, 25));
  runtime::ExecutorOptions o;
  o.execution = sched::Execution::Readiness;
  o.hint = sched::Hint::Backfill;
  o.memory_limit = 8;
  const sched::MeasuredDurations m = measured();
  const sched::DriverOptions d = runtime::driver_options(o, noise, m, false);
  EXPECT_DOUBLE_EQ(d.late_delay, 25.0);
  EXPECT_DOUBLE_EQ(d.late_delay, noise.congestion_delay_ms());
  EXPECT_DOUBLE_EQ(d.arrival_spread, noise.arrival_spread());
  EXPECT_GT(d.arrival_spread, 0.0);
  EXPECT_DOUBLE_EQ(d.spread, m.spread());
  ASSERT_TRUE(d.estimate);
  EXPECT_DOUBLE_EQ(d.estimate(sched::Action{sched::OpKind::F, 3, 0}), (20.0 + 22.0 + 18.5) / 3);
  EXPECT_DOUBLE_EQ(d.memory_limit, 8.0);
  EXPECT_EQ(d.hint, sched::Hint::Backfill);
}

// Other rankings plan with no estimate: nothing of the noise or the measurements reaches them.
TEST(DriverOptions, OtherRankingsGetNoEstimates) {
  const sched::Schedule s = sched::zb_h1(2, 8);
  const sim::NoiseModel noise(s, sched::uniform_cost(20, 20, 20, 1), congestion(0.15, 25));
  for (const auto& [execution, hint] : {std::pair{sched::Execution::Strict, sched::Hint::Backfill},
                                        std::pair{sched::Execution::Readiness, sched::Hint::Critical}}) {
    runtime::ExecutorOptions o;
    o.execution = execution;
    o.hint = hint;
    const sched::DriverOptions d = runtime::driver_options(o, noise, measured(), false);
    EXPECT_FALSE(d.estimate);
    EXPECT_DOUBLE_EQ(d.late_delay, 0.0);
    EXPECT_DOUBLE_EQ(d.arrival_spread, 0.0);
    EXPECT_DOUBLE_EQ(d.spread, 0.0);
  }
}
