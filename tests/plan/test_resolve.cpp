// config::resolve: every derived default computed once, and the same value the deck shows in resolved.yaml.
#include <gtest/gtest.h>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"

using namespace conductor;

namespace {

config::Deck parsed(std::vector<std::string> overrides) {
  config::LoadOptions o;
  o.overrides = std::move(overrides);
  o.command = config::Command::Simulate;
  return config::parse_deck("", o);
}

}  // namespace

// A deck as parsed (finalize writes the derived keys back) and the same deck built in code (nothing written
// back) resolve to the same plan numbers: resolve is where the defaults come from.
TEST(Resolve, DerivedDefaultsEqualWhatTheParsedDeckShows) {
  for (const std::string kind : {"1f1b", "zb-2p", "gpipe", "zb-h2"}) {
    const config::Deck deck = parsed({"schedule.kind=" + kind, "parallel.pipeline=3", "parallel.microbatches=7"});
    config::Deck raw;
    raw.schedule.kind = kind;
    raw.parallel.pipeline = 3;
    raw.parallel.microbatches = 7;
    const plan::Plan a = config::resolve(deck), b = config::resolve(raw);
    ASSERT_EQ(a.memory.rank_limit.size(), 3u) << kind;
    EXPECT_EQ(a.memory.rank_limit, b.memory.rank_limit) << kind;
    EXPECT_EQ(a.memory.rank_limit[2], deck.schedule.memory_limit) << kind;
    EXPECT_EQ(a.memory.rank_limit[0], plan::default_memory_limit(kind, 3, 7, 1)) << kind;
    EXPECT_EQ(a.costs.memory_after_b, deck.cost.memory_after_b) << kind;
    EXPECT_EQ(b.costs.memory_after_b, plan::memory_after_b_from_model(64, 4, 64)) << kind;
  }
}

TEST(Resolve, GivenValuesWin) {
  const plan::Plan p = config::resolve(
      parsed({"schedule.memory_limit=2.5", "cost.memory_after_b=0.25", "optim.decay_steps=7", "run.steps=3"}));
  EXPECT_EQ(p.memory.rank_limit, std::vector<double>(4, 2.5));
  EXPECT_EQ(p.costs.memory_after_b, 0.25);
  EXPECT_EQ(p.optim.decay_steps, 7);
  EXPECT_EQ(config::resolve(parsed({"run.steps=3"})).optim.decay_steps, 3);  // 0 = run.steps
}

// Costs from the model dimensions and bandwidth; the simulator and the generators see only the result.
TEST(Resolve, CostsFromTheModelAndBandwidth) {
  const config::Deck deck = parsed(
      {"cost.device_tflops=100", "cost.bandwidth_gbps=10", "cost.comm=0.5", "parallel.pipeline=2", "model.n_layers=3"});
  const plan::Plan p = config::resolve(deck);
  ASSERT_EQ(p.costs.forward.size(), 2u);
  // Rank 0: two of the three layers, F = 2 (24 tokens h^2 + 4 tokens s h) FLOPs at 1e11 FLOP/ms.
  const double tokens = 4.0 * 64, h = 64, s = 64;
  EXPECT_DOUBLE_EQ(p.costs.forward[0], 2 * (24 * tokens * h * h + 4 * tokens * s * h) / 1e11);
  EXPECT_DOUBLE_EQ(p.costs.backward_weight[0], 2 * 24 * tokens * h * h / 1e11);
  EXPECT_EQ(p.activation_bytes, 4.0 * 4 * 64 * 64);
  EXPECT_DOUBLE_EQ(p.costs.comm, 0.5 + p.activation_bytes / 10e9 * 1e3);
  EXPECT_EQ(config::resolve(parsed({"trace.enabled=false"})).trace.comm_events, false);
}

// A file: schedule without a limit has none in the plan; its limit is the loaded schedule's own peak.
TEST(Resolve, FileScheduleLimitComesFromTheSchedule) {
  config::Deck deck;
  deck.schedule.kind = "file:unused";
  const plan::Plan p = config::resolve(deck);
  EXPECT_TRUE(p.memory.rank_limit.empty());
  plan::Plan with_1f1b = p;
  with_1f1b.schedule.kind = "1f1b";
  const sched::Schedule s = sched::make_schedule(with_1f1b);  // unlimited: no rank limit in the plan
  const std::vector<double> limits = sched::rank_memory_limits(p, s);
  ASSERT_EQ(limits.size(), 4u);
  EXPECT_DOUBLE_EQ(limits[0], 4.0);  // 1F1B's rank 0 holds p microbatches
  EXPECT_DOUBLE_EQ(sched::memory_limit_for(p, s), 4.0);
}
