// Backfilling (Hint::Backfill, driver.hpp): the hint list is a reservation, so with exact estimates and nothing
// varying, readiness is never slower than strict execution of the same list; and it wins where inputs are late.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>

#include "backfill_cases.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"

using namespace conductor;
using namespace conductor::sched;

using backfill_cases::run;

// The fast property grid (p in {2, 4, 8}); test_backfill_wide.cpp runs p up to 64 (label slow).
TEST(Backfill, NeverSlowerThanStrictWithoutNoise) {
  int cases = 0;
  for (int p : {2, 4, 8}) {
    cases += backfill_cases::for_each_noise_free_case(
        p, [&](const std::string& kind, int m, const backfill_cases::Shape& shape, double strict, double backfill) {
          EXPECT_LE(backfill, strict + 1e-9) << kind << " p=" << p << " m=" << m << " " << shape.name;
        });
  }
  EXPECT_GT(cases, 150);
}

// Cause (1) and (3) of the readiness issue: a greedy bfw rank runs ahead (forwards beyond its own depth, or a
// long W started just before a critical input) and delays the backward chain; backfilling does not.
TEST(Backfill, TiesWhereGreedyReadinessLost) {
  for (const std::string kind : {"1f1b", "zb-h1"}) {
    const CostModel cost = uniform_cost(1, 1, 1, 0.05);
    const Schedule s = generate(kind, 8, 32, 1, cost);
    const double limit = default_memory_limit(kind, 8, 32, 1);
    const double strict = run(s, cost, Execution::Strict, Hint::Schedule, limit).makespan();
    const double bfw = run(s, cost, Execution::Readiness, Hint::BFW, limit).makespan();
    const double backfill = run(s, cost, Execution::Readiness, Hint::Backfill, limit).makespan();
    EXPECT_GT(bfw, strict * 1.005) << kind << ": the greedy case must lose for this test to mean anything";
    EXPECT_LE(backfill, strict + 1e-9) << kind;
  }
}

// Under jitter (noise-free estimates, lognormal sigma 0.5) backfilling is never slower than strict on average
// over noise draws, and fills some gaps: faster where the list has gaps to fill (zb-h1, zb-2p). Greedy bfw wins
// more there but loses on 1f1b; closing that gap is the open part of the readiness work.
TEST(Backfill, NeverSlowerThanStrictUnderJitter) {
  const CostModel cost = uniform_cost(1, 1, 1, 0.05);
  for (const std::string kind : {"1f1b", "zb-h1", "zb-2p"}) {
    const Schedule s = generate(kind, 8, 32, 1, cost);
    const double limit = default_memory_limit(kind, 8, 32, 1);
    double strict = 0, backfill = 0, bfw = 0;
    for (unsigned seed = 1; seed <= 5; ++seed) {
      std::mt19937 rng(seed);
      std::map<std::tuple<int, int, int, int>, double> draw;  // one duration per op, whatever the mode
      auto time = [&](int r, const Action& a) {
        auto [it, fresh] = draw.try_emplace({r, a.chunk, a.microbatch, static_cast<int>(a.kind)}, 0.0);
        if (fresh) it->second = cost.op_time(r, a.kind, s.v) * std::lognormal_distribution<double>(0, 0.5)(rng);
        return it->second;
      };
      auto one = [&](Execution mode, Hint hint) {
        ExecOptions eo;
        eo.execution = mode;
        eo.hint = hint;
        eo.memory_limit = limit;
        eo.estimate = [&](int r, const Action& a) { return cost.op_time(r, a.kind, s.v); };
        eo.comm_estimate = eo.announce_latency = cost.comm_time();
        return execute(s, eo, time, [&](const Transfer&) { return cost.comm_time(); }).makespan();
      };
      strict += one(Execution::Strict, Hint::Schedule);
      backfill += one(Execution::Readiness, Hint::Backfill);
      bfw += one(Execution::Readiness, Hint::BFW);
    }
    std::printf("%s: strict %.2f backfill %.2f bfw %.2f\n", kind.c_str(), strict / 5, backfill / 5, bfw / 5);
    EXPECT_LE(backfill, strict + 1e-9) << kind;
    if (kind != "1f1b") {
      EXPECT_LT(backfill, strict * 0.995) << kind;
    }
  }
}
