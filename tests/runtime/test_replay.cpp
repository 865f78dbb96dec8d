// Record and replay (sim/replay.hpp): a runtime trace's events, fed in time order into fresh per-rank drivers,
// give exactly the picks the MPI runtime made, for strict and readiness execution on the cpu and emulated
// backends, at the pipeline size this binary runs with. The same driver runs the simulator, so this is the proof
// that the runtime and the simulator make the same decisions whatever the clock.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/replay.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "mpi_world.hpp"
#include "tiny_deck.hpp"

using namespace conductor;

namespace {

using conductor::test_support::world_rank;
using conductor::test_support::world_size;

struct Case {
  std::string backend, kind, execution, hint;
  std::vector<std::string> noise = {"noise.kind=gaussian", "noise.level=0.4"};
  int steps = 3;
};

config::Deck replay_deck(const Case& c, const std::string& out) {
  const int v = (c.kind == "1f1b-interleaved" || c.kind == "zb-v") ? 2 : 1;
  std::vector<std::string> o = {"backend=" + c.backend,
                                "run.steps=" + std::to_string(c.steps),
                                "run.output=" + out,
                                "trace.enabled=true",
                                "trace.comm_events=true",
                                "schedule.kind=" + c.kind,
                                "schedule.execution=" + c.execution,
                                "schedule.hint=" + c.hint};
  o.insert(o.end(), c.noise.begin(), c.noise.end());
  return conductor::test_support::tiny_run_deck("replay", v, o);
}

// The options the runtime's drivers had in `step`; backfilling's estimates are the previous step's measured
// durations of each rank's ops, their spread pooled over every step before (runtime/executor.hpp), rebuilt from
// the trace.
std::vector<sched::DriverOptions> runtime_options(const config::Deck& deck, const sched::Schedule& order,
                                                  const std::vector<trace::OpEvent>& events, int step) {
  sched::DriverOptions d;
  d.execution = sched::parse_execution(deck.schedule.execution);
  d.hint = sched::parse_hint(deck.schedule.hint);
  d.wide_spread = deck.schedule.wide_spread;
  d.memory_limit = sched::memory_limit_for(config::resolve(deck), order);
  d.memory_after_b = sched::CostModel(config::resolve(deck).costs).memory_after_b;
  std::vector<sched::DriverOptions> out(static_cast<std::size_t>(order.p), d);
  if (d.hint != sched::Hint::Backfill) return out;
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), order);
  const double arrival_spread = noise.arrival_spread();
  // The previous step's durations (estimates), their spread pooled over every step before (carry_spread).
  std::vector<sched::MeasuredDurations> measured(static_cast<std::size_t>(order.p));
  for (int earlier = 0; earlier < step; ++earlier) {
    std::vector<sched::MeasuredDurations> in_step(static_cast<std::size_t>(order.p));
    for (const auto& e : events) {
      if (e.step != earlier || !trace::is_compute(e.kind)) continue;
      const sched::Action a{static_cast<sched::OpKind>(e.kind), e.microbatch, e.chunk};
      in_step.at(static_cast<std::size_t>(e.rank)).add(a, static_cast<double>(e.end_ns - e.start_ns));
    }
    for (std::size_t r = 0; r < in_step.size(); ++r) in_step[r].carry_spread(measured[r]);
    measured = std::move(in_step);
  }
  for (int r = 0; r < order.p; ++r) {
    out[static_cast<std::size_t>(r)].estimate = measured[static_cast<std::size_t>(r)].estimate();
    out[static_cast<std::size_t>(r)].spread = measured[static_cast<std::size_t>(r)].spread();
    out[static_cast<std::size_t>(r)].arrival_spread = arrival_spread;
    out[static_cast<std::size_t>(r)].late_delay = noise.congestion_delay_ms();
  }
  return out;
}

// Cross-rank transfers of one step: the announcements a backfilling step sends (one per transfer).
int cross_rank_transfers(const sched::Schedule& order) {
  int n = 0;
  for (int r = 0; r < order.p; ++r) {
    for (const auto& a : order.ranks[static_cast<std::size_t>(r)]) {
      const auto in = sched::input_of(order, r, a);
      n += in && !in->local() ? 1 : 0;
    }
  }
  return n;
}

struct Replayed {
  int reordered = 0;             // picks that were not the next listed op
  int unannounced_diverged = 0;  // backfill: steps whose replay without the ANNOUNCE events picks otherwise
};

// Runs the case under MPI into a fresh folder in the temporary directory, `name` and the world size; returns its
// deck (out: the folder).
config::Deck run_case(const Case& c, const std::string& name, std::string& out) {
  out = (std::filesystem::temp_directory_path() / (name + "-" + std::to_string(world_size()))).string();
  if (world_rank() == 0) std::filesystem::remove_all(out);
  MPI_Barrier(MPI_COMM_WORLD);
  const config::Deck deck = replay_deck(c, out);
  runtime::train(config::resolve(deck), MPI_COMM_WORLD);
  return deck;
}

// Runs the case under MPI; rank 0 replays every step (and, backfilling, again without the announcements).
Replayed run_and_replay(const Case& c) {
  std::string out;
  const config::Deck deck =
      run_case(c, "conductor-replay-" + c.backend + "-" + c.kind + "-" + c.execution + "-" + c.hint, out);
  Replayed replayed;
  if (world_rank() == 0) {
    const trace::Trace t = trace::read_trace(out + "/trace.h5");
    const sched::Schedule order = sched::make_schedule(config::resolve(deck));
    const bool backfill = c.hint == "backfill";
    // Emulated transfers take the cost model's comm time, and so do announcements, as in the simulator: the driver
    // learns of one no earlier than that after its producing op began.
    const std::int64_t latency_ns =
        c.backend == "emulated" ? std::llround(sched::CostModel(config::resolve(deck).costs).comm_time() * 1e6) : 0;
    for (const auto& e : t.events) {
      if (e.kind == trace::EventKind::ANNOUNCE) {
        EXPECT_GE(e.end_ns - e.start_ns, latency_ns) << c.backend << " " << c.kind << " step " << e.step;
      }
    }
    for (int step = 0; step < deck.run.steps; ++step) {
      // Backfilling: every transfer was announced once (the first step has no estimates: no announcement named
      // a time), and none leaked into another step.
      const auto announced = std::count_if(t.events.begin(), t.events.end(), [&](const trace::OpEvent& e) {
        return e.step == step && e.kind == trace::EventKind::ANNOUNCE;
      });
      EXPECT_EQ(announced, backfill && step > 0 ? cross_rank_transfers(order) : 0)
          << c.backend << " " << c.kind << " " << c.hint << " step " << step;
      const auto options = runtime_options(deck, order, t.events, step);
      const sim::ReplayResult r = sim::replay_step(order, options, t.events, step);
      EXPECT_TRUE(r.same) << c.backend << " " << c.kind << " " << c.execution << " " << c.hint << ": " << r.message;
      EXPECT_EQ(r.picks, static_cast<int>(order.num_actions()));
      replayed.reordered += r.reordered;
      if (backfill) {
        std::vector<trace::OpEvent> unannounced = t.events;
        std::erase_if(unannounced, [](const trace::OpEvent& e) { return e.kind == trace::EventKind::ANNOUNCE; });
        replayed.unannounced_diverged += sim::replay_step(order, options, unannounced, step).same ? 0 : 1;
      }
    }
    std::filesystem::remove_all(out);
  }
  MPI_Bcast(&replayed.reordered, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(&replayed.unannounced_diverged, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return replayed;
}

// A run's timings follow the machine: under load (ctest -j2 on 2 cores, four ranks of two tests) a run may give
// no evidence that a mechanism acted (no op out of list order, no pick that needed an announcement, no rank past
// the spread switch). Such a case runs again, up to kAttempts times; the check that every pick was the driver's
// holds for every attempt, so a broken mechanism still fails every one.
constexpr int kAttempts = 4;

}  // namespace

TEST(Replay, RuntimePicksAreTheDriversPicks) {
  int readiness_reordered = 0;
  for (const std::string backend : {"cpu", "emulated"}) {
    for (const std::string kind : {"1f1b", "zb-h1", "1f1b-interleaved", "zb-v"}) {
      for (const auto& [execution, hint] : std::vector<std::pair<std::string, std::string>>{
               {"strict", "schedule"}, {"readiness", "bfw"}, {"readiness", "schedule"}}) {
        const int reordered = run_and_replay({backend, kind, execution, hint}).reordered;
        if (execution == "strict") {
          EXPECT_EQ(reordered, 0) << backend << " " << kind;
        } else {
          readiness_reordered += reordered;
        }
      }
    }
  }
  // The check has teeth: readiness ran ops out of list order, and the drivers chose the same ones.
  if (world_rank() == 0) {
    EXPECT_GT(readiness_reordered, 0);
  }
}

// Backfilling in the runtime: producers announce every cross-rank input when they start its op, consumers
// receive every announcement within the step, and use them: with a straggler, ranks start ops out of list
// order, fresh drivers fed the trace's arrivals, announcements and the previous step's measured durations
// choose exactly the same ops, and, on each backend, drivers fed the same trace without its announcements choose
// otherwise in some step (an op started before an input it could only have known of from an announcement).
TEST(Replay, BackfillAnnouncementsArriveAndAreUsed) {
  for (const std::string backend : {"cpu", "emulated"}) {
    Replayed total;
    for (int attempt = 0; attempt < kAttempts && (total.reordered == 0 || total.unannounced_diverged == 0); ++attempt) {
      for (const std::string kind : {"1f1b", "zb-h1", "1f1b-interleaved"}) {
        Case c{backend, kind, "readiness", "backfill"};
        // Backfilling at any spread: the cpu backend's measured spread (the real math's time plus only the positive
        // part of the noise's extra) is wide in some steps, where the driver would rank as critical and backfill
        // nothing (Replay.BackfillUnderAWideMeasuredSpreadRanksAsCritical tests that switch).
        c.noise = {"noise.kind=[gaussian,straggler]", "noise.level=0.3", "noise.straggler_rank=0",
                   "noise.straggler_factor=2", "schedule.wide_spread=100"};
        if (backend == "emulated") {
          // Ops of 5 ms, announcements waiting half an op: 1 ms sleeps round up to several ms on a loaded machine
          // (ctest -j2 on 2 cores), which evened out the straggler and left backfilling nothing to reorder.
          c.noise.insert(c.noise.end(),
                         {"cost.forward=5", "cost.backward_input=5", "cost.backward_weight=5", "cost.comm=2.5"});
        }
        // The cpu backend's picks follow its real op times: on a loaded machine (other jobs on its 2 cores) 4 steps
        // once gave no pick that needed an announcement; 6 give it more chances.
        c.steps = backend == "cpu" ? 6 : 4;
        const Replayed r = run_and_replay(c);
        total.reordered += r.reordered;
        total.unannounced_diverged += r.unannounced_diverged;
      }
    }
    if (world_rank() == 0) {
      EXPECT_GT(total.reordered, 0) << backend << ": backfilling never started an op out of list order";
      EXPECT_GT(total.unannounced_diverged, 0) << backend << ": no pick depended on an announcement";
    }
  }
}

// Backfill under a wide spread: each rank's previous step gives it its spread of op times (DriverOptions::spread),
// the injected congestion its spread of input arrivals (arrival_spread); from kWideSpread on its driver ranks as
// critical (sched::ranking), and the runtime made exactly those picks: the replay with the measured options is the
// same, the replay that keeps backfilling (`capped`: the spread of the case's noise just below the switch) is not.
// Returns, on every rank, the rank-steps that ranked as critical and the steps whose capped replay diverged.
struct Wide {
  int critical = 0, capped_diverged = 0;
};
Wide replay_wide(Case c, const std::string& name, const std::function<void(sched::DriverOptions&)>& capped_by) {
  // An ample memory limit: critical runs under it, backfilling under its list's own peak, so a first stage that
  // has its next F ready when a B arrives runs the F under critical and the listed B under backfilling. Under
  // the kind's own limit (p M_F) that F did not fit at p = 2, and on a loaded machine (CI) the two picked alike.
  c.noise.push_back("schedule.memory_limit=64");
  c.steps = 4;
  std::string out;
  const config::Deck deck = run_case(c, name, out);
  Wide wide;
  if (world_rank() == 0) {
    const trace::Trace t = trace::read_trace(out + "/trace.h5");
    const sched::Schedule order = sched::make_schedule(config::resolve(deck));
    for (int step = 0; step < deck.run.steps; ++step) {
      const auto options = runtime_options(deck, order, t.events, step);
      for (const auto& o : options) wide.critical += sched::ranking(o) == sched::Hint::Critical ? 1 : 0;
      const sim::ReplayResult r = sim::replay_step(order, options, t.events, step);
      EXPECT_TRUE(r.same) << name << " step " << step << ": " << r.message;
      auto capped = options;
      for (auto& o : capped) capped_by(o);
      wide.capped_diverged += sim::replay_step(order, capped, t.events, step).same ? 0 : 1;
    }
    std::filesystem::remove_all(out);
  }
  MPI_Bcast(&wide.critical, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Bcast(&wide.capped_diverged, 1, MPI_INT, 0, MPI_COMM_WORLD);
  return wide;
}

// replay_wide until a rank ranked as critical and the capped replay diverged (kAttempts at most); checks both.
void expect_wide(const Case& c, const std::string& name, const std::function<void(sched::DriverOptions&)>& capped_by,
                 const std::string& what) {
  Wide total;
  for (int attempt = 0; attempt < kAttempts && (total.critical == 0 || total.capped_diverged == 0); ++attempt) {
    const Wide w = replay_wide(c, name, capped_by);
    total.critical += w.critical;
    total.capped_diverged += w.capped_diverged;
  }
  EXPECT_GT(total.critical, 0) << "no rank measured " << what << " of " << sched::kWideSpread << " or more";
  EXPECT_GT(total.capped_diverged, 0) << name << ": backfilling would have picked the same: the switch is not tested";
}

const double kBelowSwitch = std::nextafter(sched::kWideSpread, 0.0);

// Op times spread (log-normal sigma 1).
TEST(Replay, BackfillUnderAWideMeasuredSpreadRanksAsCritical) {
  Case c{"emulated", "zb-h1", "readiness", "backfill"};
  c.noise = {"noise.kind=[lognormal]", "noise.level=1.0", "cost.forward=5", "cost.backward_input=5",
             "cost.backward_weight=5"};
  expect_wide(
      c, "conductor-replay-wide",
      [](sched::DriverOptions& o) {
        o.spread = std::min(o.spread, kBelowSwitch);
        o.arrival_spread = std::min(o.arrival_spread, kBelowSwitch);
      },
      "a spread");
}

// Input arrivals spread: the injected congestion delays half the transfers by 2 F (a standard deviation of one F),
// while emulated ops take their cost model's time. The switch comes from the arrival spread alone: capping it keeps
// backfilling.
TEST(Replay, BackfillUnderCongestionRanksAsCritical) {
  Case c{"emulated", "zb-h1", "readiness", "backfill"};
  c.noise = {"noise.kind=[congestion]",   "noise.level=2",  "noise.congestion_prob=0.5",
             "noise.congestion_delay=-1", "cost.forward=5", "cost.backward_input=5",
             "cost.backward_weight=5"};
  expect_wide(
      c, "conductor-replay-congestion",
      [](sched::DriverOptions& o) { o.arrival_spread = std::min(o.arrival_spread, kBelowSwitch); },
      "an arrival spread");
}

// A replay with other options than the runtime's diverges: the comparison can fail. The first stage straggles
// (four times slower), so the second stage reorders by construction, not by the noise: after F0 and B0 its list's
// next op is F1, which the first stage is still computing (20 ms against the second stage's 10 ms for F0 and B0),
// and W0 is ready, so readiness runs W0 first in every step, and strict replay of the same events expects F1.
// (With the last stage straggling, its inputs were always early and only the noise reordered an op: under
// ctest -j4 on 2 cores, where 1 ms sleeps round up to several ms, whole runs reordered nothing.)
// Rank 0's part of WrongOptionsDiverge for one run: whether some step's replay reordered an op, and whether the
// strict replay of some step diverged.
struct Wrong {
  int reordered = 0, diverged = 0;
};
void replay_wrong(const config::Deck& deck, const std::string& out, Wrong& found) {
  const trace::Trace t = trace::read_trace(out + "/trace.h5");
  // The runtime records its clock's UNIX epoch: the first op began within the last ten minutes of wall time.
  ASSERT_TRUE(t.info.epoch_unix_ns.has_value());
  const std::int64_t now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const std::int64_t began = *t.info.epoch_unix_ns + t.events.front().start_ns;
  EXPECT_LE(began, now);
  EXPECT_GT(began, now - 600'000'000'000LL);
  const sched::Schedule order = sched::make_schedule(config::resolve(deck));
  for (int step = 0; step < deck.run.steps; ++step) {
    const auto options = runtime_options(deck, order, t.events, step);
    found.reordered |= sim::replay_step(order, options, t.events, step).reordered > 0 ? 1 : 0;
    auto strict = options;
    for (auto& o : strict) o.execution = sched::Execution::Strict;
    found.diverged |= sim::replay_step(order, strict, t.events, step).same ? 0 : 1;
  }
}

TEST(Replay, WrongOptionsDiverge) {
  const Case c{"emulated",
               "zb-h1",
               "readiness",
               "bfw",
               {"noise.kind=[gaussian,straggler]", "noise.level=0.1", "noise.straggler_rank=0",
                "noise.straggler_factor=4", "cost.forward=5", "cost.backward_input=5", "cost.backward_weight=5"},
               3};
  Wrong found;
  for (int attempt = 0; attempt < kAttempts && found.reordered == 0; ++attempt) {
    std::string out;
    const config::Deck deck = run_case(c, "conductor-replay-wrong", out);
    if (world_rank() == 0) {
      replay_wrong(deck, out, found);
      std::filesystem::remove_all(out);
    }
    MPI_Bcast(&found.reordered, 1, MPI_INT, 0, MPI_COMM_WORLD);
  }
  if (world_rank() != 0) return;
  ASSERT_TRUE(found.reordered) << "the straggling first stage reordered no op of the second: the case tests nothing";
  EXPECT_TRUE(found.diverged);
}
