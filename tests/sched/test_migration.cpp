// Computation migration in the virtual-time engine (migration.hpp, engine.cpp): a hand-computed case, the
// helper's memory, and the decision's arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/migration.hpp"

using namespace conductor;
using namespace conductor::sched;

namespace {

// p = 2, m = 1, strict: each rank runs F0 B0 W0. Rank 0 takes 1 ms per op, rank 1 (the straggling stage) 3 ms;
// transfers between stages take 0.
Schedule two_ranks() {
  return parse_text("pipeline 2\nmicrobatches 1\nvirtual 1\nrank 0: 0F0 0B0 0W0\nrank 1: 0F0 0B0 0W0\n");
}

// Every op splits into 4 equal slices, all of it sliceable; a helper takes at most 2. A migrated op moves
// 1 MB plus 0.5 MB per slice over a 1 GB/s link (1e6 bytes per ms) and pays 0.1 ms of latency once.
plan::Migration unit_migration() {
  plan::Migration m;
  m.enabled = true;
  m.slices = 4;
  m.max_fraction = 0.5;
  m.bandwidth_gbps = 1;
  m.latency_ms = 0.1;
  plan::SliceCosts c;
  c.sliced_fraction = 1;
  c.bytes_fixed = 1e6;
  c.bytes_per_slice = 0.5e6;
  c.messages = 1;
  m.ops.assign(2, {c, c, c});
  m.memory_unit_bytes.assign(2, 1e6);  // one M_F = 1 MB: a 1.5 MB help holds 1.5 M_F
  return m;
}

plan::Costs straggling_costs() {
  plan::Costs c;
  c.forward = c.backward_input = c.backward_weight = {1.0, 3.0};
  return c;
}

ExecResult run(const plan::Migration& m, std::vector<double> limits = {}) {
  const Schedule s = two_ranks();
  const CostModel cost(straggling_costs());
  ExecOptions eo;
  eo.rank_memory_limit = std::move(limits);
  eo.migration = migrations(m, cost, s.p, s.v);
  return execute(
      s, eo, [&](int r, const Action& a) { return cost.op_time(r, a.kind, s.v); }, [](const Transfer&) { return 0.0; });
}

}  // namespace

// Hand computation. Without migration: r0 F0 [0,1], r1 F0 [1,4], B0 [4,7], W0 [7,10]; r0 B0 [7,8], W0 [8,9]:
// makespan 10 ms.
// With it (a slice of a 3 ms op is 0.75 ms; k slices move 1 + 0.5k MB = (1 + 0.5k) ms, +0.1 ms latency):
//   t=0   r0 F0 (1 ms): k=1 would take max(0.75, 1.5+0.1+0.25) = 1.85 > 1: alone, [0,1].
//   t=1   r1 F0 (3 ms): r0 is idle and its next op (B0) waits on rank 1 itself: k=1 takes
//         max(2.25, 1.5+0.1+0.75 = 2.35) = 2.35, k=2 max(1.5, 2+0.1+1.5 = 3.6): k=1, [1, 3.35], r0 helps [1, 3.35].
//   t=3.35 r1 B0: the same, [3.35, 5.70]; r0 helps [3.35, 5.70].
//   t=5.70 r0 (first in rank order) starts B0, r1 is still to pick: no offer; r1 W0 then finds r0 busy: alone
//         [5.70, 8.70]; r0 B0 [5.70, 6.70], W0 [6.70, 7.70].
// Makespan 8.70 ms; 2 ops migrated, 2 x 1.5 MB = 3 MB, all on link (1 -> 0). Busy: r0 3 + 2 x 0.75 = 4.5 ms,
// r1 2.25 + 2.25 + 3 = 7.5 ms. Rank 0's peak memory: 1 M_F (its F0) + 1.5 M_F of help = 2.5 M_F.
TEST(Migration, HandComputedStragglerCase) {
  const ExecResult off = run(plan::Migration{});
  EXPECT_NEAR(off.makespan(), 10.0, 1e-12);
  EXPECT_TRUE(off.migrations.empty());
  const ExecResult on = run(unit_migration());
  EXPECT_NEAR(on.makespan(), 8.70, 1e-9);
  ASSERT_EQ(on.migrations.size(), 2u);
  double bytes = 0;
  for (const MigrationTiming& m : on.migrations) {
    EXPECT_EQ(m.owner, 1);
    EXPECT_EQ(m.helper, 0);
    EXPECT_EQ(m.slices, 1);
    EXPECT_NEAR(m.end - m.start, 2.35, 1e-9);
    bytes += m.bytes;
  }
  EXPECT_NEAR(on.migrations[0].start, 1.0, 1e-12);
  EXPECT_NEAR(on.migrations[1].start, 3.35, 1e-9);
  EXPECT_DOUBLE_EQ(bytes, 3e6);
  EXPECT_NEAR(on.busy[0], 4.5, 1e-9);
  EXPECT_NEAR(on.busy[1], 7.5, 1e-9);
  EXPECT_NEAR(on.peak_memory[0], 2.5, 1e-9);
  EXPECT_NEAR(off.peak_memory[0], 1.0, 1e-12);
}

// A helper whose free memory cannot hold the help (limit 2 M_F, 1 M_F in use, 1.5 M_F needed) is never asked:
// the step runs as without migration.
TEST(Migration, HelpersMemoryLimitRefusesHelp) {
  const ExecResult on = run(unit_migration(), {2.0, 2.0});
  EXPECT_TRUE(on.migrations.empty());
  EXPECT_NEAR(on.makespan(), 10.0, 1e-12);
  EXPECT_LE(on.peak_memory[0], 2.0);
  const ExecResult roomy = run(unit_migration(), {2.5, 2.5});  // exactly enough
  EXPECT_EQ(roomy.migrations.size(), 2u);
}

// Replicas (migration.weights: replicas): of a slice's 0.5 MB, 0.4 MB are weights, so a help by a holder moves
// 1 + 0.1k MB; each rank's replica (4 slices of weights, 1.6 MB = 1.6 M_F) sits on the other rank when its budget has
// room after its own peak (1 M_F), and its refresh is in at 1.6 + 0.1 = 1.7 ms.
//   limit 4 on rank 0: held 1.6, so at t=1 (F0 of rank 1, refresh not in: on demand, 1.5 M_F) it has
//     4 - 1.6 - 1 = 1.4 M_F free: refused. At t=4 (B0) the replica is in: k=1 moves 1.1 MB (help 1.1 + 0.1 + 0.75
//     = 1.95, owner 2.25), so B0 [4, 6.25]; then r0 B0 [6.25, 7.25], W0 [7.25, 8.25] and r1 W0 alone [6.25, 9.25].
//     Rank 0's peak: its F0 (1) + the help (1.1) + the replica (1.6) = 3.7 M_F.
//   limit 3: 0.4 M_F free, nothing migrates (on demand it would: 2 M_F free).
//   limit 2.5: no room for the replica (1.5 < 1.6): only rank 0's replica is placed (on rank 1); rank 0 then helps
//     on demand as in the hand-computed case.
TEST(Migration, ReplicasAndInFlightSlicesCountedAgainstTheBudget) {
  plan::Migration m = unit_migration();
  m.replicas = true;
  m.replica_peers = 1;
  for (auto& kinds : m.ops) {
    for (plan::SliceCosts& c : kinds) c.weight_bytes_per_slice = 0.4e6;
  }
  m.replica_bytes.assign(2, 1.6e6);
  const ExecResult four = run(m, {4.0, 10.0});
  ASSERT_EQ(four.migrations.size(), 1u);
  EXPECT_EQ(four.migrations[0].helper, 0);
  EXPECT_NEAR(four.migrations[0].start, 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(four.migrations[0].bytes, 1.1e6);
  EXPECT_NEAR(four.makespan(), 9.25, 1e-9);
  EXPECT_NEAR(four.peak_memory[0], 1.0 + 1.1 + 1.6, 1e-9);
  EXPECT_NEAR(four.peak_memory[1], 1.0 + 1.6, 1e-9);
  ASSERT_EQ(four.refreshes.size(), 2u);
  for (const ReplicaRefresh& x : four.refreshes) {
    EXPECT_EQ(x.holder, 1 - x.owner);
    EXPECT_DOUBLE_EQ(x.bytes, 1.6e6);
    EXPECT_NEAR(x.ready, 1.7, 1e-12);
  }
  const ExecResult three = run(m, {3.0, 10.0});
  EXPECT_TRUE(three.migrations.empty());
  EXPECT_NEAR(three.peak_memory[0], 1.0 + 1.6, 1e-9);
  plan::Migration on_demand = unit_migration();
  EXPECT_FALSE(run(on_demand, {3.0, 10.0}).migrations.empty());
  const ExecResult tight = run(m, {2.5, 10.0});
  ASSERT_EQ(tight.refreshes.size(), 1u);
  EXPECT_EQ(tight.refreshes[0].owner, 0);
  ASSERT_EQ(tight.migrations.size(), 2u);
  EXPECT_DOUBLE_EQ(tight.migrations[0].bytes, 1.5e6);
  EXPECT_NEAR(tight.peak_memory[0], 2.5, 1e-9);
}

// No bandwidth: nothing moves (a deck never gets free transfers).
TEST(Migration, NoBandwidthNoMigration) {
  plan::Migration m = unit_migration();
  m.bandwidth_gbps = 0;
  const ExecResult on = run(m);
  EXPECT_TRUE(on.migrations.empty());
  EXPECT_NEAR(on.makespan(), 10.0, 1e-12);
}

// The decision: the best k, only when it gains, within the offer's window and the fraction.
TEST(Migration, DecisionTakesTheBestFeasibleSplit) {
  const Migration mig(unit_migration(), straggling_costs(), 1, 1);
  EXPECT_EQ(mig.max_slices(), 2);
  HelpOffer peer;
  peer.rank = 0;
  Offload o = mig.decide(OpKind::F, 0.0, 3.0, {peer});
  EXPECT_EQ(o.helper, 0);
  EXPECT_EQ(o.slices, 1);
  EXPECT_NEAR(o.op_time, 2.35, 1e-12);
  EXPECT_NEAR(o.owner_time, 2.25, 1e-12);
  peer.until = 2.0;  // the help (2.35 ms) would end after the peer's next input: refused
  EXPECT_EQ(mig.decide(OpKind::F, 0.0, 3.0, {peer}).helper, -1);
  peer.until = 1e9;
  peer.speed = 3.0;  // a slow peer: 1.6 + 2.25 = 3.85 > 3, no gain
  EXPECT_EQ(mig.decide(OpKind::F, 0.0, 3.0, {peer}).helper, -1);
  EXPECT_EQ(Migration().decide(OpKind::F, 0.0, 3.0, {HelpOffer{0}}).helper, -1);  // disabled
}

// Several helpers (migration.helpers): the earliest end over the splits of the slices among the offers, each
// within its window and max_fraction (2 of 4 slices). Rank 1's 3 ms op, on a cheaper link than above: k slices on a
// helper take 0.1 + 0.05k ms of transfer, 0.1 ms latency and 0.75k ms of compute = 0.2 + 0.8k; the owner keeps
// 3 - 0.75K for K slices moved in all. One helper: k=1 max(2.25, 1.0) = 2.25, k=2 max(1.5, 1.8) = 1.8. Two:
// (1, 1) max(1.5, 1.0, 1.0) = 1.5, (2, 1) max(0.75, 1.8) = 1.8, (2, 2) 1.8: one slice each, 1.5 ms.
TEST(Migration, SeveralHelpersShareTheSlices) {
  plan::Migration m = unit_migration();
  plan::SliceCosts c;
  c.sliced_fraction = 1;
  c.bytes_fixed = 0.1e6;
  c.bytes_per_slice = 0.05e6;
  c.messages = 1;
  m.ops.assign(2, {c, c, c});
  HelpOffer a, b;
  a.rank = 0;
  b.rank = 2;
  m.helpers = 1;
  const Offload one = Migration(m, straggling_costs(), 1, 1).decide(OpKind::F, 0.0, 3.0, {a, b});
  EXPECT_EQ(one.slices, 2);
  EXPECT_TRUE(one.more.empty());
  EXPECT_NEAR(one.op_time, 1.8, 1e-12);
  m.helpers = 2;
  const Offload two = Migration(m, straggling_costs(), 1, 1).decide(OpKind::F, 0.0, 3.0, {a, b});
  ASSERT_EQ(two.parts().size(), 2u);
  EXPECT_EQ(two.slices + two.more[0].slices, 2);
  EXPECT_NEAR(two.owner_time, 1.5, 1e-12);
  EXPECT_NEAR(two.op_time, 1.5, 1e-12);
  EXPECT_NE(two.helper, two.more[0].helper);
  b.until = 0.5;  // the second offer's window is too short for any slice: one helper again
  EXPECT_TRUE(Migration(m, straggling_costs(), 1, 1).decide(OpKind::F, 0.0, 3.0, {a, b}).more.empty());
}

// The decision against brute force over random offers (windows, speeds, memory, replicas; 12 slices, at most 6 per
// helper): every part it takes is feasible (within the offer's window, memory and max_fraction, each helper once,
// at most every slice), its op time is the longest part, and with one helper it is the best split of all (offer,
// k), and never worse than that with three; it moves nothing only when no split gains.
TEST(Migration, DecisionMatchesBruteForceOverRandomOffers) {
  plan::Migration m = unit_migration();
  m.slices = 12;
  m.memory_unit_bytes.assign(8, 1e6);
  m.ops.assign(8, m.ops[0]);
  m.ops[1][0].weight_bytes_per_slice = 0.2e6;
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int helpers : {1, 3}) {
    m.helpers = helpers;
    const Migration mig(m, straggling_costs(), 1, 1);
    for (int trial = 0; trial < 400; ++trial) {
      const double now = 5 * u(rng), estimate = 0.5 + 6 * u(rng);
      std::vector<HelpOffer> offers;
      for (int q : {0, 2, 3, 4, 5, 6, 7}) {
        if (u(rng) < 0.3) continue;
        HelpOffer o;
        o.rank = q;
        if (u(rng) < 0.7) o.until = now + 8 * u(rng);
        if (u(rng) < 0.3) o.memory_free = 4 * u(rng);
        o.speed = 0.5 + 2 * u(rng);
        o.replica = u(rng) < 0.3;
        offers.push_back(o);
      }
      // The best single-helper split by brute force.
      double best = estimate;
      for (const HelpOffer& o : offers) {
        for (int k = 1; k <= mig.max_slices(); ++k) {
          const Offload s = mig.split(OpKind::F, estimate, k, o);
          if (now + s.help_time <= o.until + 1e-9 && s.memory <= o.memory_free) best = std::min(best, s.op_time);
        }
      }
      const Offload d = mig.decide(OpKind::F, now, estimate, offers);
      const std::string at = "helpers " + std::to_string(helpers) + ", trial " + std::to_string(trial);
      int moved = 0;
      double longest = d.owner_time;
      std::vector<int> seen;
      for (const HelpPart& h : d.parts()) {
        const auto it =
            std::find_if(offers.begin(), offers.end(), [&](const HelpOffer& o) { return o.rank == h.helper; });
        ASSERT_NE(it, offers.end()) << at;
        EXPECT_EQ(std::count(seen.begin(), seen.end(), h.helper), 0) << at;
        seen.push_back(h.helper);
        EXPECT_GE(h.slices, 1) << at;
        EXPECT_LE(h.slices, mig.max_slices()) << at;
        EXPECT_LE(now + h.help_time, it->until + 1e-8) << at;
        EXPECT_LE(h.memory, it->memory_free + 1e-9) << at;
        EXPECT_NEAR(h.help_time, mig.split(OpKind::F, estimate, h.slices, *it).help_time, 1e-12) << at;
        moved += h.slices;
        longest = std::max(longest, h.help_time);
      }
      EXPECT_LE(static_cast<int>(seen.size()), helpers) << at;
      EXPECT_LE(moved, 12) << at;
      EXPECT_NEAR(d.op_time, longest, 1e-12) << at;
      EXPECT_LE(d.op_time, best + 1e-6 * estimate) << at;
      if (helpers == 1) {
        EXPECT_NEAR(d.op_time, best, 1e-6 * estimate) << at;
      }
      if (d.helper < 0) {
        EXPECT_EQ(d.op_time, estimate) << at;
        EXPECT_GE(best, estimate - 1e-6 * estimate) << at;
      }
    }
  }
}

// A random decision: 1-40 slices, any max_fraction, random slice costs, one to six offers with random windows,
// memory, speeds and replicas. helpers: per op (0: random, 1-4).
struct RandomDecision {
  Migration mig;
  double now = 0, estimate = 0;
  std::vector<HelpOffer> offers;
  RandomDecision(std::mt19937& rng, int helpers) {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    plan::Migration m = unit_migration();
    m.memory_unit_bytes.assign(8, 1e6);
    m.slices = 1 + static_cast<int>(40 * u(rng));
    m.max_fraction = 0.1 + 0.9 * u(rng);
    m.helpers = helpers > 0 ? helpers : 1 + static_cast<int>(4 * u(rng));
    plan::SliceCosts c;
    c.sliced_fraction = 0.2 + 0.8 * u(rng);
    c.bytes_fixed = 2e6 * u(rng);
    c.bytes_per_slice = 1e6 * u(rng);
    c.weight_bytes_per_slice = c.bytes_per_slice * u(rng);
    c.messages = static_cast<int>(3 * u(rng));
    c.helper_factor = 0.8 + 0.4 * u(rng);
    m.ops.assign(8, {c, c, c});
    mig = Migration(m, straggling_costs(), 1, 1);
    now = 5 * u(rng), estimate = 0.2 + 20 * u(rng);
    const int count = 1 + static_cast<int>(6 * u(rng));
    for (int q = 0; q < count; ++q) {
      HelpOffer o;
      o.rank = q == 1 ? 7 : q;
      if (u(rng) < 0.6) o.until = now + 25 * u(rng);
      if (u(rng) < 0.3) o.memory_free = 10 * u(rng);
      o.speed = 0.5 + 2 * u(rng);
      o.replica = u(rng) < 0.3;
      offers.push_back(o);
    }
  }
};

// The located threshold (Migration::Search::Located: the bisection's outcome from the least feasible tau, found
// in closed form and checked to the ulp) against the bisection at every midpoint, over random offers, estimates
// and costs, one to six offers and one to four helpers per op (one helper: the least of the candidates' own
// thresholds; several: the bisection itself): the same decision to the bit.
TEST(Migration, LocatedThresholdEqualsTheBisection) {
  std::mt19937 rng(7);
  int migrated = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    const RandomDecision r(rng, 0);
    const Migration& mig = r.mig;
    const double now = r.now, estimate = r.estimate;
    const std::vector<HelpOffer>& offers = r.offers;
    const Offload a = mig.decide(OpKind::F, now, estimate, offers, Migration::Search::Located);
    const Offload b = mig.decide(OpKind::F, now, estimate, offers, Migration::Search::Bisection);
    const std::string at = "trial " + std::to_string(trial);
    ASSERT_EQ(a.parts().size(), b.parts().size()) << at;
    EXPECT_EQ(a.op_time, b.op_time) << at;
    EXPECT_EQ(a.owner_time, b.owner_time) << at;
    for (std::size_t j = 0; j < a.parts().size(); ++j) {
      EXPECT_EQ(a.parts()[j].helper, b.parts()[j].helper) << at;
      EXPECT_EQ(a.parts()[j].slices, b.parts()[j].slices) << at;
      EXPECT_EQ(a.parts()[j].help_time, b.parts()[j].help_time) << at;
      EXPECT_EQ(a.parts()[j].bytes, b.parts()[j].bytes) << at;
    }
    migrated += a.helper >= 0 ? 1 : 0;
  }
  EXPECT_GT(migrated, 300);  // the grid exercises the decisions that move slices, not only "alone"
}

// The engine's shortcuts before it builds offers (Migration::least_help, Migration::takes_any): an offer they
// refuse takes no slice, and with one helper per op the decision without the refused offers is the same to the
// bit; where least_help refuses the op, every decision (any number of helpers) is "alone".
TEST(Migration, OfferShortcutsDropOnlyOffersThatTakeNothing) {
  std::mt19937 rng(17);
  int refused = 0, kept = 0, moved = 0, alone_ops = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    RandomDecision r(rng, trial % 2 == 0 ? 1 : 0);
    // Some windows that end before the fixed transfers can: just past now.
    for (std::size_t j = 0; j < r.offers.size(); j += 3) r.offers[j].until = r.now + 1e-3 * (1 + static_cast<int>(j));
    const std::string at = "trial " + std::to_string(trial);
    const double least = r.mig.least_help(OpKind::F, r.estimate);
    const Offload all = r.mig.decide(OpKind::F, r.now, r.estimate, r.offers);
    if (std::isnan(least)) {
      EXPECT_EQ(all.helper, -1) << at;
      ++alone_ops;
      continue;
    }
    std::vector<HelpOffer> taken;
    for (const HelpOffer& o : r.offers) {
      if (Migration::takes_any(least, r.now, r.estimate, o.until)) {
        taken.push_back(o);
        ++kept;
      } else {
        EXPECT_EQ(r.mig.most_slices(OpKind::F, r.now, r.estimate, o), 0) << at;
        ++refused;
      }
    }
    if (r.mig.max_helpers() != 1) continue;
    const Offload some = r.mig.decide(OpKind::F, r.now, r.estimate, taken);
    EXPECT_EQ(some.helper, all.helper) << at;
    EXPECT_EQ(some.slices, all.slices) << at;
    EXPECT_EQ(some.op_time, all.op_time) << at;
    EXPECT_EQ(some.bytes, all.bytes) << at;
    moved += all.helper >= 0 ? 1 : 0;
  }
  // The grid exercises refused and kept offers, moves, and ops no offer could help.
  EXPECT_GT(refused, 500);
  EXPECT_GT(kept, 500);
  EXPECT_GT(moved, 300);
  EXPECT_GT(alone_ops, 0);
  // An op shorter than its fixed transfers: no offer at all.
  plan::Migration m = unit_migration();
  plan::SliceCosts c;
  c.sliced_fraction = 0.5;
  c.bytes_fixed = 1e9;
  m.ops.assign(8, {c, c, c});
  EXPECT_TRUE(std::isnan(Migration(m, straggling_costs(), 1, 1).least_help(OpKind::F, 0.5)));
}

// The default decision with one helper per op (Migration::Search::Direct: each offer's best split in closed
// form) against every split of every offer: the earliest end (ties: the first offer, then the fewest slices),
// and "alone" where no split ends the op sooner. The bisection, whose end is within 1e-7 of the op's time of the
// least, ends no sooner. Returns whether the op moves slices.
bool expect_direct_is_best(const Migration& mig, double now, double estimate, const std::vector<HelpOffer>& offers,
                           const std::string& at) {
  Offload best;
  best.op_time = estimate - 1e-9 * std::max(1.0, estimate);
  for (const HelpOffer& o : offers) {
    for (int k = 1; k <= mig.most_slices(OpKind::F, now, estimate, o); ++k) {
      const Offload s = mig.split(OpKind::F, estimate, k, o);
      if (s.op_time < best.op_time) best = s;
    }
  }
  const Offload d = mig.decide(OpKind::F, now, estimate, offers);
  const Offload b = mig.decide(OpKind::F, now, estimate, offers, Migration::Search::Bisection);
  EXPECT_EQ(d.helper, best.helper) << at;
  if (best.helper < 0) {
    EXPECT_EQ(d.op_time, estimate) << at;
    EXPECT_EQ(b.helper, -1) << at;
    return false;
  }
  EXPECT_EQ(d.slices, best.slices) << at;
  EXPECT_EQ(d.op_time, best.op_time) << at;
  EXPECT_EQ(d.bytes, best.bytes) << at;
  EXPECT_LE(d.op_time, b.op_time) << at;
  EXPECT_LE(b.op_time, d.op_time + 1e-7 * estimate) << at;
  return true;
}

// Over random offers, estimates and costs.
TEST(Migration, DirectDecisionIsTheBestSplit) {
  std::mt19937 rng(11);
  int migrated = 0, alone = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    const RandomDecision r(rng, 1);
    const bool moved = expect_direct_is_best(r.mig, r.now, r.estimate, r.offers, "trial " + std::to_string(trial));
    (moved ? migrated : alone) += 1;
  }
  // The grid exercises both outcomes.
  EXPECT_GT(migrated, 300);
  EXPECT_GT(alone, 300);
}

// On the knife's edge: estimates within a few ulps of where the owner's part at some k equals the helper's at k
// (the closed-form crossing then rounds to either side of the level) or at k + 1 (the two levels tie, and the
// fewest slices win). Random costs rarely land there.
TEST(Migration, DirectDecisionIsTheBestSplitWhereThePartsCross) {
  std::mt19937 rng(13);
  int edges = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    RandomDecision r(rng, 1);
    HelpOffer o = r.offers.front();
    o.until = std::numeric_limits<double>::infinity();
    o.memory_free = std::numeric_limits<double>::infinity();
    const int most = r.mig.most_slices(OpKind::F, r.now, r.estimate, o);
    if (most < 2) continue;
    const int k = 1 + static_cast<int>(rng() % static_cast<unsigned>(most - 1));
    for (const int d : {0, 1}) {
      // The owner's part at k less the helper's at k + d grows with the estimate where it crosses at all:
      // bisect to the adjacent doubles.
      const auto gap = [&](double e) {
        return r.mig.split(OpKind::F, e, k, o).owner_time - r.mig.split(OpKind::F, e, k + d, o).help_time;
      };
      double lo = 1e-6, hi = 1e4;
      if (!(gap(lo) < 0 && gap(hi) > 0)) continue;
      for (double mid = lo + (hi - lo) / 2; mid > lo && mid < hi; mid = lo + (hi - lo) / 2)
        (gap(mid) < 0 ? lo : hi) = mid;
      ++edges;
      double e = lo;
      for (int j = 0; j < 3; ++j) e = std::nextafter(e, 0.0);
      for (int j = 0; j < 7; ++j, e = std::nextafter(e, 1e300)) {
        const std::string at = "trial " + std::to_string(trial) + ", k " + std::to_string(k) + "+" + std::to_string(d) +
                               ", ulp " + std::to_string(j);
        expect_direct_is_best(r.mig, r.now, e, {o}, at);
      }
    }
  }
  EXPECT_GT(edges, 1000);
}

// The engine builds the input chains from its producers' links (each op's cross-rank consumer): the same chains
// as from the schedule's inputs, on every generator, with one and two chunks per rank.
TEST(Migration, InputChainsFromTheProducersLinksEqualTheSchedules) {
  const CostModel cost(straggling_costs());
  for (const std::string& kind : generator_kinds()) {
    for (const int v : {1, 2}) {
      Schedule s;
      try {
        s = generate(kind, 4, 8, v, cost);
      } catch (const InputError&) {
        continue;  // not built with this v
      }
      std::vector<std::vector<std::int32_t>> consumer(4), consumer_rank(4);
      std::vector<Arbiter> arbiters;
      for (int r = 0; r < 4; ++r) arbiters.emplace_back(s, r, 0.0, 0.0);
      int links = 0;
      for (int r = 0; r < 4; ++r) {
        for (const Action& a : s.ranks[r]) {
          const auto out = output_of(s, r, a);
          const bool remote = out && !out->local();
          consumer[r].push_back(remote ? arbiters[out->to_rank].consumer_of(*out) : -1);
          consumer_rank[r].push_back(remote ? out->to_rank : -1);
          links += remote ? 1 : 0;
        }
      }
      const InputChains from_schedule(s), from_links(consumer, consumer_rank);
      const std::string at = kind + " v=" + std::to_string(v);
      EXPECT_GT(links, 0) << at;
      for (int r = 0; r < 4; ++r) {
        for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
          EXPECT_EQ(from_links.producer(r, i), from_schedule.producer(r, i)) << at << " rank " << r << " op " << i;
          EXPECT_EQ(from_links.producer_op(r, i), from_schedule.producer_op(r, i))
              << at << " rank " << r << " op " << i;
        }
      }
    }
  }
}

// The bound on a peer's awaited input (InputChains, shared by the engine and the runtime) on a hand-set state:
// p = 4, one microbatch, rank 3 deciding. Rank 2's F0 waits for rank 1's F0, which waits for rank 0's.
TEST(Migration, InputBoundFollowsTheProducerChain) {
  const Schedule s = parse_text(
      "pipeline 4\nmicrobatches 1\nvirtual 1\nrank 0: 0F0 0B0 0W0\nrank 1: 0F0 0B0 0W0\n"
      "rank 2: 0F0 0B0 0W0\nrank 3: 0F0 0B0 0W0\n");
  const InputChains chains(s);
  EXPECT_EQ(chains.producer(2, 0), 1);
  EXPECT_EQ(chains.producer(1, 1), 2);  // B0's gradient
  EXPECT_EQ(chains.producer(0, 0), -1);
  EXPECT_EQ(chains.producer_op(2, 0), 0);  // rank 1's F0, first in its list
  EXPECT_EQ(chains.producer_op(1, 1), 1);  // rank 2's B0
  EXPECT_EQ(chains.producer_op(0, 0), -1);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double rank1_input = nan;  // rank 1's F0 input: announced or not
  bool rank1_waits = true;
  PeerKnowledge known;
  known.expected = [&](int r, int i) { return r == 1 && i == 0 ? rank1_input : nan; };
  known.waiting = [&](int r, int i) { return r == 1 && i == 0 && rank1_waits; };
  known.estimate = [](int r, int) { return 2.0 + r; };
  known.comm = 0.5;
  // Rank 1 waits, its input announced at 5: rank 2's input no earlier than 5 + 3 (rank 1's F) + 0.5.
  rank1_input = 5;
  EXPECT_DOUBLE_EQ(chains.earliest_input(2, 0, 3, 1.0, known), 8.5);
  // Not announced: followed up to rank 0, whose F0 may start now (1): 1 + 2 + 0.5 + 3 + 0.5.
  rank1_input = nan;
  EXPECT_DOUBLE_EQ(chains.earliest_input(2, 0, 3, 1.0, known), 7.0);
  // Rank 0 deciding: its F0 comes after the op being decided, so after the help.
  EXPECT_TRUE(std::isinf(chains.earliest_input(2, 0, 0, 1.0, known)));
  // Rank 1 may start at once (not known to wait): now + its F + the transfer.
  rank1_waits = false;
  EXPECT_DOUBLE_EQ(chains.earliest_input(2, 0, 3, 1.0, known), 4.5);
  // No estimates: nothing known.
  known.estimate = nullptr;
  EXPECT_TRUE(std::isnan(chains.earliest_input(2, 0, 3, 1.0, known)));
}
