// Computation migration through the simulator, from decks: it never makes a noise-free balanced strict step
// slower (property over a small grid), it gains on a straggling stage, migration that never fires changes nothing,
// and summary.json reports the bytes per link.
#include <gtest/gtest.h>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/sim/summary_json.hpp"

using namespace conductor;

namespace {

plan::Plan plan_of(std::vector<std::string> overrides) {
  config::LoadOptions o;
  o.command = config::Command::Simulate;
  o.overrides = std::move(overrides);
  o.overrides.push_back("trace.enabled=false");
  return config::resolve(config::parse_deck("", o));
}

sim::RunResult simulate(const plan::Plan& plan) {
  const sched::Schedule s = sched::make_schedule(plan);
  return sim::simulate_run(s, sim::NoiseModel::from_plan(plan, s), sim::SimOptions::from_plan(plan, s), plan.run.steps);
}

// A small GPT whose costs come from its dimensions: 8 heads, d_model 256, 8 layers.
std::vector<std::string> model(int p, int m, const std::string& kind) {
  return {"model.d_model=256",
          "model.n_heads=8",
          "model.n_layers=8",
          "model.seq_len=128",
          "model.vocab=512",
          "parallel.pipeline=" + std::to_string(p),
          "parallel.microbatches=" + std::to_string(m),
          "schedule.kind=" + kind,
          "cost.device_tflops=0.05",
          "cost.bandwidth_gbps=25",
          "cost.comm=0.01",
          "run.steps=1"};
}

}  // namespace

// Property: over schedules x p x m x link, noise-free and strict, with balanced stage costs (one value for every
// rank), the step with migration is never slower than without.
TEST(MigrationSim, NeverSlowerWhenBalancedAndNoiseFree) {
  int migrated = 0;
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "zb-2p"}) {
    for (int p : {2, 4}) {
      for (int m : {4, 8}) {
        for (const char* link : {"nvlink", "infiniband"}) {
          std::vector<std::string> o = model(p, m, kind);
          for (const char* k :
               {"cost.device_tflops=0", "cost.forward=1", "cost.backward_input=1.1", "cost.backward_weight=0.9"})
            o.push_back(k);
          const sim::RunResult off = simulate(plan_of(o));
          o.push_back("migration.enabled=true");
          o.push_back(std::string("migration.link=") + link);
          const sim::RunResult on = simulate(plan_of(o));
          EXPECT_LE(on.mean_makespan_ms, off.mean_makespan_ms + 1e-9)
              << kind << " p=" << p << " m=" << m << " " << link;
          migrated += on.mean_migrated_ops > 0;
        }
      }
    }
  }
  EXPECT_GT(migrated, 0) << "no cell migrated anything: the property would hold vacuously";
}

// The LM-head stage carries more work than the others: migration moves some of it and the step gets faster.
TEST(MigrationSim, StragglingHeadStageGains) {
  std::vector<std::string> o = model(4, 8, "zb-2p");
  o.push_back("model.vocab=16384");
  const sim::RunResult off = simulate(plan_of(o));
  o.push_back("migration.enabled=true");
  o.push_back("migration.link=nvlink");
  const sim::RunResult on = simulate(plan_of(o));
  EXPECT_LT(on.mean_makespan_ms, 0.98 * off.mean_makespan_ms);
  EXPECT_GT(on.mean_migration_bytes, 0);
  double per_link = 0;
  for (const auto& [link, bytes] : on.mean_link_bytes) {
    EXPECT_NE(link.first, link.second);
    per_link += bytes;
  }
  EXPECT_DOUBLE_EQ(per_link, on.mean_migration_bytes);
}

// Enabled on a link so slow that no help ever pays: every figure equals the run without migration, noise and all
// (the engine's migration bookkeeping changes nothing by itself).
TEST(MigrationSim, NeverFiringIsIdentical) {
  std::vector<std::string> o = model(4, 8, "zb-2p");
  for (const char* k : {"noise.kind=gaussian", "noise.level=0.1", "noise.seed=3", "run.steps=3"}) o.push_back(k);
  const sim::RunResult off = simulate(plan_of(o));
  for (const char* k :
       {"migration.enabled=true", "migration.link=custom", "migration.bandwidth_gbps=1e-9", "migration.latency_us=0"})
    o.push_back(k);
  const sim::RunResult on = simulate(plan_of(o));
  EXPECT_EQ(on.mean_migrated_ops, 0);
  ASSERT_EQ(on.steps.size(), off.steps.size());
  for (std::size_t k = 0; k < on.steps.size(); ++k) {
    EXPECT_EQ(on.steps[k].makespan_ms, off.steps[k].makespan_ms);
    EXPECT_EQ(on.steps[k].busy_ms, off.steps[k].busy_ms);
    EXPECT_EQ(on.steps[k].stage_bubble_ratio, off.steps[k].stage_bubble_ratio);
  }
}

// summary.json has a migration object only when migration is on, with bytes per step and per link.
TEST(MigrationSim, SummaryReportsBytesPerLink) {
  std::vector<std::string> o = model(4, 8, "zb-2p");
  o.push_back("model.vocab=16384");
  const plan::Plan off = plan_of(o);
  const sched::Schedule s = sched::make_schedule(off);
  EXPECT_FALSE(sim::summary_json(simulate(off), off, s, 8).contains("migration"));
  o.push_back("migration.enabled=true");
  const plan::Plan on = plan_of(o);
  const sim::RunResult run = simulate(on);
  const sim::Json j = sim::summary_json(run, on, s, 8);
  ASSERT_TRUE(j.contains("migration"));
  EXPECT_DOUBLE_EQ(j["migration"]["bytes_per_step"].get<double>(), run.mean_migration_bytes);
  EXPECT_EQ(j["migration"]["link"], "infiniband");
  EXPECT_EQ(j["migration"]["links"].size(), run.mean_link_bytes.size());
  EXPECT_GT(run.mean_migration_bytes, 0);
}
