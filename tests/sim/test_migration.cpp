// Computation migration through the simulator, from decks: it never makes a noise-free balanced strict step
// slower (property over a small grid), it gains on a straggling stage, migration that never fires changes nothing,
// summary.json reports the bytes per link, and the trace holds the helpers' rows as the runtime writes them.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <tuple>

#include "conductor/trace/summary.hpp"

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

// Property: over schedules x p x m x link (and several helpers per op), noise-free and strict, with balanced stage
// costs (one value for every rank), the step with migration is never slower than without.
TEST(MigrationSim, NeverSlowerWhenBalancedAndNoiseFree) {
  int migrated = 0;
  for (const char* kind : {"gpipe", "1f1b", "zb-h1", "zb-2p"}) {
    for (int p : {2, 4}) {
      for (int m : {4, 8}) {
        for (const char* link : {"nvlink", "infiniband", "nvlink, 3 helpers"}) {
          std::vector<std::string> o = model(p, m, kind);
          for (const char* k :
               {"cost.device_tflops=0", "cost.forward=1", "cost.backward_input=1.1", "cost.backward_weight=0.9"})
            o.push_back(k);
          const sim::RunResult off = simulate(plan_of(o));
          o.push_back("migration.enabled=true");
          const bool several = std::string(link).find("helpers") != std::string::npos;
          o.push_back(several ? std::string("migration.link=nvlink") : std::string("migration.link=") + link);
          if (several) o.push_back("migration.helpers=3");
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
  for (std::size_t k = 0; k < on.mean_link_bytes.size(); ++k) {
    const sim::LinkBytes& l = on.mean_link_bytes[k];
    EXPECT_NE(l.from, l.to);
    if (k > 0) {  // one entry per link, by (from, to)
      const sim::LinkBytes& b = on.mean_link_bytes[k - 1];
      EXPECT_TRUE(b.from < l.from || (b.from == l.from && b.to < l.to));
    }
    per_link += l.bytes;
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
  EXPECT_FALSE(j["migration"].contains("refresh_bytes_per_step"));
  // Replicas on one peer each (memory with room for them everywhere): every rank's refresh (its replica bytes)
  // is in the step's bytes and its link's.
  o.push_back("migration.weights=replicas");
  o.push_back("schedule.memory_limit=1000");
  const plan::Plan rep = plan_of(o);
  const sim::RunResult with = simulate(rep);
  const sim::Json k = sim::summary_json(with, rep, s, 8);
  double refresh = 0;
  for (double b : rep.migration.replica_bytes) refresh += b;
  EXPECT_DOUBLE_EQ(k["migration"]["refresh_bytes_per_step"].get<double>(), refresh);
  EXPECT_GE(with.mean_migration_bytes, refresh);
  EXPECT_GE(sim::bytes_on(with.mean_link_bytes, 0, 1), rep.migration.replica_bytes[0]);  // rank 0's holder: rank 1
}

// The trace of a simulated step with migration has the runtime's rows (docs/migration.md): each migrated op once
// on its owner with `migrated` = the slices sent away, and per helper one HELP_<kind> row (peer = the owner, same
// stage, chunk and microbatch, its slices, the bytes moved) inside the owner's op; the helpers' slices add up to
// the owner's; help rows count as busy time in the trace's figures. Several helpers per op, so parts add up.
TEST(MigrationSim, TraceHasHelpRowsInsideTheirOwnersOps) {
  std::vector<std::string> o = model(4, 8, "zb-2p");
  for (const char* k : {"model.vocab=16384", "migration.enabled=true", "migration.link=nvlink", "migration.helpers=3",
                        "noise.kind=gaussian", "noise.level=0.1", "noise.seed=3"})
    o.push_back(k);
  const plan::Plan plan = plan_of(o);
  const sched::Schedule s = sched::make_schedule(plan);
  sim::SimOptions options = sim::SimOptions::from_plan(plan, s);
  options.record_events = true;
  const sim::StepResult r = sim::simulate_step(s, sim::NoiseModel::from_plan(plan, s), options, 0, 0.0);
  ASSERT_GT(r.migrated_ops, 0);
  int help_rows = 0, owner_rows = 0, several = 0;
  std::map<std::tuple<int, int, int, int>, int> slices;  // (owner, kind, chunk, microbatch): helpers' slices
  for (const trace::OpEvent& h : r.events) {
    const int kind = static_cast<int>(h.kind);
    if (kind < static_cast<int>(trace::EventKind::HELP_F)) {
      owner_rows += h.migrated > 0;
      continue;
    }
    ++help_rows;
    several += slices[{h.peer, kind, h.chunk, h.microbatch}] > 0;
    slices[{h.peer, kind, h.chunk, h.microbatch}] += h.migrated;
    ASSERT_NE(h.peer, h.rank);
    EXPECT_GT(h.migrated, 0);
    EXPECT_GT(h.bytes, 0);
    EXPECT_GT(h.end_ns, h.start_ns);
    int owners = 0;
    for (const trace::OpEvent& e : r.events) {
      if (e.rank != h.peer || static_cast<int>(e.kind) != kind - static_cast<int>(trace::EventKind::HELP_F) ||
          e.chunk != h.chunk || e.microbatch != h.microbatch)
        continue;
      ++owners;
      EXPECT_EQ(e.stage, h.stage);
      EXPECT_GE(e.migrated, h.migrated);
      EXPECT_LE(e.start_ns, h.start_ns);
      EXPECT_GE(e.end_ns, h.end_ns);
    }
    EXPECT_EQ(owners, 1) << "help row of rank " << h.rank << " for rank " << h.peer;
  }
  EXPECT_EQ(owner_rows, r.migrated_ops);  // every migrated op once on its owner, and only those
  EXPECT_EQ(static_cast<int>(slices.size()), r.migrated_ops);
  EXPECT_GT(several, 0) << "no op had two helpers";
  EXPECT_GT(help_rows, r.migrated_ops);
  for (const trace::OpEvent& e : r.events) {
    if (e.migrated > 0 && static_cast<int>(e.kind) < static_cast<int>(trace::EventKind::HELP_F)) {
      EXPECT_EQ((slices[{e.rank, static_cast<int>(e.kind) + static_cast<int>(trace::EventKind::HELP_F), e.chunk,
                         e.microbatch}]),
                e.migrated);
    }
  }
  // The trace's busy time of a rank: its ops (a migrated one spans its owner's wait for the help's return) and
  // its help rows; never less than the simulator's compute.
  const trace::StepRecord rec = trace::summarize_step(r.events, s.p, 0, 1.0);
  double sim_busy = 0;
  for (int q = 0; q < s.p; ++q) sim_busy += r.busy_ms[static_cast<std::size_t>(q)];
  const double trace_busy = (1.0 - rec.bubble_ratio) * s.p * static_cast<double>(rec.makespan_ns) * 1e-6;
  EXPECT_GE(trace_busy, sim_busy - 1e-3);
}

// A step's bytes per link: one entry per link, sorted, each link's bytes added in the order given (the order a
// map's += had: 1 + 1e16 - 1e16 is 0, not 1).
TEST(MigrationSim, LinkBytesSumPerLinkInOrder) {
  const std::vector<sim::LinkBytes> sum =
      sim::sum_links({{2, 1, 1.0}, {0, 1, 0.1}, {2, 1, 1e16}, {0, 1, 0.2}, {2, 1, -1e16}, {0, 3, 5.0}});
  ASSERT_EQ(sum.size(), 3u);
  EXPECT_EQ(sum[0].from, 0);
  EXPECT_EQ(sum[0].to, 1);
  EXPECT_EQ(sum[0].bytes, 0.1 + 0.2);
  EXPECT_EQ(sum[1].to, 3);
  EXPECT_EQ(sum[2].from, 2);
  EXPECT_EQ(sum[2].bytes, 0.0);
  EXPECT_EQ(sim::bytes_on(sum, 0, 3), 5.0);
  EXPECT_EQ(sim::bytes_on(sum, 1, 0), 0.0);
  EXPECT_TRUE(sim::sum_links({}).empty());
}

// The p x p table and the sort sum alike (each link's bytes in the order given), whichever sum_links takes.
TEST(MigrationSim, LinkBytesTableAndSortAgree) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> rank(0, 5);
  std::uniform_real_distribution<double> bytes(0.0, 1e9);
  std::vector<sim::LinkBytes> links;
  for (int k = 0; k < 400; ++k) links.push_back(sim::LinkBytes{rank(rng), rank(rng), bytes(rng)});
  const std::vector<sim::LinkBytes> table = sim::sum_links(links, 6), sorted = sim::sum_links(links);
  ASSERT_EQ(table.size(), sorted.size());
  for (std::size_t k = 0; k < table.size(); ++k) {
    EXPECT_EQ(table[k].from, sorted[k].from);
    EXPECT_EQ(table[k].to, sorted[k].to);
    EXPECT_EQ(table[k].bytes, sorted[k].bytes);
  }
}
