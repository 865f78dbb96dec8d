// The order bound (sim/order_bound.hpp): equal to a hand computation, reached where the lists are tight, and never
// above the makespan of any execution of the same draws (every generator, strict and readiness, noise on ops and
// transfers); the gap the heavy-variability benchmark's ceiling column measures.
#include <gtest/gtest.h>

#include <algorithm>

#include "conductor/sched/generators.hpp"
#include "conductor/sim/order_bound.hpp"
#include "conductor/sim/simulator.hpp"

using namespace conductor;
using namespace conductor::sched;
using namespace conductor::sim;

namespace {

plan::Noise noise_of(std::vector<std::string> kinds, double level, unsigned long long seed) {
  plan::Noise n;
  n.kind = std::move(kinds);
  n.level = level;
  n.seed = seed;
  n.congestion_prob = 0.5;
  return n;
}

SimOptions options(Execution e, Hint h) {
  SimOptions o;
  o.execution = e;
  o.hint = h;
  return o;
}

}  // namespace

// p = 2, one microbatch, F = B = W = 1, comm 0.5: the one chain F0, F1, B1, B0, W0 with two transfers is
// 5 + 2 x 0.5 = 6 ms, and rank 1's W1 runs beside the chain's tail. Strict execution takes exactly that.
TEST(OrderBound, EqualsTheHandComputedChain) {
  const CostModel c = uniform_cost(1, 1, 1, 0.5);
  const Schedule s = generate("zb-h1", 2, 1, 1, c);
  const NoiseModel none(s, c, noise_of({"none"}, 0, 1));
  EXPECT_DOUBLE_EQ(order_bound_ms(s, none, 0), 6.0);
  EXPECT_DOUBLE_EQ(simulate_step(s, none, options(Execution::Strict, Hint::Schedule), 0).makespan_ms, 6.0);
}

// Without noise or transfer time 1F1B's list is tight: the last rank starts once the first forward has crossed the
// pipeline, works without a gap, and the last backward's chain down to rank 0 follows. The bound is that sum.
// (With transfer time 1F1B's steady state waits a round trip per microbatch on the last rank, which no bound
// that leaves the list's order out can see.)
TEST(OrderBound, ReachedByOneFOneBWithoutNoise) {
  const CostModel c = uniform_cost(1, 2, 0, 0);
  const Schedule s = generate("1f1b", 4, 8, 1, c);
  const NoiseModel none(s, c, noise_of({"none"}, 0, 1));
  const double makespan = simulate_step(s, none, options(Execution::Strict, Hint::Schedule), 0).makespan_ms;
  // Head of the last rank 3 x 1, its work 8 x 3, the chain after its last BW 3 x 2.
  EXPECT_DOUBLE_EQ(order_bound_ms(s, none, 0), 3 + 24 + 6);
  EXPECT_NEAR(makespan, order_bound_ms(s, none, 0), 1e-9);
}

// The claim the ceiling rests on: no execution of the same draws is faster, whatever the generator, the mode or
// the noise (op times and transfer delays), and the bound is at least the busiest rank's work.
TEST(OrderBound, NoExecutionOfTheSameDrawsIsFaster) {
  const CostModel c = uniform_cost(1, 1.2, 0.8, 0.1, 0.4);
  int checked = 0;
  for (const std::string& kind : generator_kinds()) {
    for (int p : {2, 4}) {
      const int v = kind == "1f1b-interleaved" || plan::v_shaped_kind(kind) ? 2 : 1;
      Schedule s;
      try {
        s = generate(kind, p, 2 * p, v, c);
      } catch (const std::exception&) {
        continue;  // a generator that refuses this shape
      }
      for (const auto& kinds : {std::vector<std::string>{"lognormal"}, std::vector<std::string>{"congestion"},
                                std::vector<std::string>{"lognormal", "congestion"}}) {
        const NoiseModel n(s, c, noise_of(kinds, 1.0, 7));
        for (int step = 0; step < 3; ++step) {
          const double bound = order_bound_ms(s, n, step);
          for (auto [e, h] : {std::pair{Execution::Strict, Hint::Schedule},
                              {Execution::Readiness, Hint::BFW},
                              {Execution::Readiness, Hint::Backfill},
                              {Execution::Readiness, Hint::Critical}}) {
            const StepResult r = simulate_step(s, n, options(e, h), step);
            EXPECT_LE(bound, r.makespan_ms * (1 + 1e-12)) << kind << " p=" << p << " step " << step;
            EXPECT_GE(bound, r.lower_bound_ms * (1 - 1e-12)) << kind << " p=" << p;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GE(checked, 8 * 2 * 3 * 3 * 4);
}
