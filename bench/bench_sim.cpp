// Simulator benchmark: (1) speed in events (ops) per second at p=64, m=512 and p=1024, m=4096;
// (2) the table: every schedule x noise level (0, 5%, 10%, 20% lognormal jitter) x {strict, readiness
// with each hint} at p=8, m=24 and m=64: bubble ratio (global), per-stage bubble (the Zero Bubble paper's) and
// makespan / lower bound, averaged over seeds x steps.
// (3) with --split DECK...: each deck under ZB-2p strict with its own layer split vs model.layers_per_stage:
// balanced (costs derived from the model: cost.device_tflops=150, what the shipped GPT-3 decks' cost lists were
// computed with), noise-free and under 10% Gaussian jitter (inputs/noise/jitter10.yaml, 5 seeds x 20 steps).
// Usage: bench_sim [--quick | --speed | --split DECK...]   (--quick skips p=1024; --speed runs only part 1)
// Times are CPU seconds of this process (std::clock), so a loaded shared machine does not inflate them.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/util/error.hpp"

using namespace conductor;

namespace {

double cpu_seconds_since(std::clock_t t0) { return static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC; }

plan::Noise lognormal(double level, unsigned long long seed) {
  plan::Noise n;
  n.kind = {level > 0 ? "lognormal" : "none"};
  n.level = level;
  n.seed = seed;
  return n;
}

void speed(const std::string& kind, int p, int m, sched::Execution ex, sched::Hint hint, int steps) {
  const sched::CostModel cost = sched::uniform_cost(1.0, 1.0, 1.0, 0.05, 0.5);
  std::clock_t t0 = std::clock();
  const sched::Schedule s = sched::generate(kind, p, m, kind == "zb-v" ? 2 : 1, cost);
  const double gen = cpu_seconds_since(t0);
  const sim::NoiseModel noise(s, cost, lognormal(0.1, 1));
  sim::SimOptions o;
  o.execution = ex;
  o.hint = hint;
  o.memory_limit = sched::default_memory_limit(kind, p, m, s.v);
  t0 = std::clock();
  const sim::RunResult r = sim::simulate_run(s, noise, o, steps);
  const double t = cpu_seconds_since(t0);
  const double ops = static_cast<double>(s.num_actions()) * steps;
  std::printf(
      "%-7s p=%-5d m=%-5d %-9s %-8s  generate %7.3f s  simulate %7.3f s/step  %8.2f M events/s  "
      "(%zu ops/step, bubble %.4f)\n",
      kind.c_str(), p, m, sched::to_string(ex), sched::to_string(hint), gen, t / steps, ops / t / 1e6, s.num_actions(),
      r.mean_bubble_ratio);
}

struct Cell {
  double bubble = 0, stage_bubble = 0, ratio = 0;
};

Cell measure(const sched::Schedule& s, const sched::CostModel& cost, double level, sched::Execution ex,
             sched::Hint hint, double limit, int seeds, int steps) {
  Cell c;
  for (int seed = 1; seed <= seeds; ++seed) {
    const sim::NoiseModel noise(s, cost, lognormal(level, static_cast<unsigned long long>(seed)));
    sim::SimOptions o;
    o.execution = ex;
    o.hint = hint;
    o.memory_limit = limit;
    const sim::RunResult r = sim::simulate_run(s, noise, o, steps);
    for (const auto& st : r.steps) {
      c.bubble += st.bubble_ratio;
      c.stage_bubble += st.stage_bubble_ratio;
      c.ratio += st.makespan_ms / st.lower_bound_ms;
    }
  }
  c.bubble /= seeds * steps;
  c.stage_bubble /= seeds * steps;
  c.ratio /= seeds * steps;
  return c;
}

void table(int p, int m, int seeds, int steps) {
  const sched::CostModel cost = sched::uniform_cost(1.0, 1.0, 1.0, 0.05, 0.5);
  std::printf(
      "\n### p = %d, m = %d (F = B = W = 1 ms, comm 0.05 ms, memory_after_b 0.5, lognormal jitter; "
      "mean over %d seeds x %d steps; cells: bubble ratio / per-stage bubble / makespan:LB)\n\n",
      p, m, seeds, steps);
  std::printf(
      "| schedule | noise | strict | ready schedule | ready bf | ready bfw | ready backfill |\n"
      "|---|---|---|---|---|---|---|\n");
  const std::vector<std::string> kinds = {"gpipe", "1f1b", "1f1b-interleaved", "zb-h1", "zb-h2", "zb-1p",
                                          "zb-2p", "zb-v"};
  for (const auto& kind : kinds) {
    const int v = kind == "zb-v" || kind == "1f1b-interleaved" ? 2 : 1;
    const sched::Schedule s = sched::generate(kind, p, m, v, cost);
    const double limit = sched::default_memory_limit(kind, p, m, v);
    for (double level : {0.0, 0.05, 0.10, 0.20}) {
      std::printf("| %s | %2.0f%% |", kind.c_str(), level * 100);
      const Cell strict = measure(s, cost, level, sched::Execution::Strict, sched::Hint::Schedule, limit, seeds, steps);
      std::printf(" %.3f / %.3f / %.3f |", strict.bubble, strict.stage_bubble, strict.ratio);
      for (sched::Hint h : {sched::Hint::Schedule, sched::Hint::BF, sched::Hint::BFW, sched::Hint::Backfill}) {
        const Cell c = measure(s, cost, level, sched::Execution::Readiness, h, limit, seeds, steps);
        std::printf(" %.3f / %.3f / %.3f |", c.bubble, c.stage_bubble, c.ratio);
      }
      std::printf("\n");
    }
  }
}

struct SplitRow {
  std::vector<int> split;
  double makespan = 0, bubble = 0, stage_bubble = 0;
};

// The deck under ZB-2p strict with `overrides`, mean over seeds x steps (seeds 0: no noise, one seed).
SplitRow run_deck(const std::string& path, const std::string& text, std::vector<std::string> overrides, double jitter,
                  int seeds, int steps) {
  SplitRow row;
  const int n = jitter > 0 ? seeds : 1;
  for (int seed = 1; seed <= n; ++seed) {
    config::LoadOptions o;
    o.source_name = path;
    o.command = config::Command::Simulate;
    o.from_file = true;
    o.overrides = overrides;
    for (const std::string& k : std::vector<std::string>{
             "schedule.kind=zb-2p", "schedule.execution=strict", "trace.enabled=false",
             "run.steps=" + std::to_string(steps), jitter > 0 ? "noise.kind=gaussian" : "noise.kind=none",
             "noise.level=" + std::to_string(jitter), "noise.seed=" + std::to_string(seed)})
      o.overrides.push_back(k);
    const config::Deck deck = config::parse_deck(text, o);
    const plan::Plan plan = config::resolve(deck);
    const sched::Schedule s = sched::make_schedule(plan);
    const sim::RunResult r =
        sim::simulate_run(s, sim::NoiseModel::from_plan(plan, s), sim::SimOptions::from_plan(plan, s), steps);
    row.split = deck.model.layers_per_stage;
    row.makespan += r.mean_makespan_ms / n;
    row.bubble += r.mean_bubble_ratio / n;
    row.stage_bubble += r.mean_stage_bubble_ratio / n;
  }
  return row;
}

// Largest relative difference, over ranks, of F+B+W between the deck's own costs and the derived ones: the
// split comparison only describes the deck when its hand-written cost lists are the derived ones.
double derived_cost_gap(const std::string& path, const std::string& text) {
  auto work = [&](std::vector<std::string> overrides) {
    config::LoadOptions o;
    o.source_name = path;
    o.command = config::Command::Simulate;
    o.from_file = true;
    o.overrides = std::move(overrides);
    const plan::Plan p = config::resolve(config::parse_deck(text, o));
    const sched::CostModel c(p.costs);
    std::vector<double> w(static_cast<std::size_t>(p.pipeline.p));
    for (int r = 0; r < p.pipeline.p; ++r) w[static_cast<std::size_t>(r)] = c.work_per_microbatch(r);
    return w;
  };
  const std::vector<double> own = work({}), derived = work({"cost.device_tflops=150"});
  double gap = 0;
  for (std::size_t r = 0; r < own.size(); ++r) gap = std::max(gap, std::abs(derived[r] - own[r]) / own[r]);
  return gap;
}

std::string list(const std::vector<int>& v) {
  std::string s;
  for (int x : v) {
    if (!s.empty()) s += ',';
    s += std::to_string(x);
  }
  return v.empty() ? "even" : s;
}

void split_table(const std::vector<std::string>& decks) {
  std::printf(
      "## deck split vs model.layers_per_stage: balanced (ZB-2p strict, cost.device_tflops=150; jitter: gaussian "
      "10%%, mean over 5 seeds x 20 steps; cells: makespan ms / bubble / per-stage bubble)\n\n"
      "| deck | split | noise-free | jitter 10%% | balanced split | noise-free | jitter 10%% | speedup (jitter) |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : decks) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    if (!in) {
      std::printf("| %s | cannot read the file |\n", path.c_str());
      continue;
    }
    try {
      const std::vector<std::string> derived = {"cost.device_tflops=150"};
      std::vector<std::string> balanced = derived;
      balanced.push_back("model.layers_per_stage=balanced");
      const SplitRow d0 = run_deck(path, text.str(), derived, 0, 1, 20);
      const SplitRow d1 = run_deck(path, text.str(), derived, 0.10, 5, 20);
      const SplitRow b0 = run_deck(path, text.str(), balanced, 0, 1, 20);
      const SplitRow b1 = run_deck(path, text.str(), balanced, 0.10, 5, 20);
      std::printf(
          "| %s | %s | %.1f / %.3f / %.3f | %.1f / %.3f / %.3f | %s | %.1f / %.3f / %.3f | %.1f / %.3f / %.3f | %.3fx "
          "|\n",
          path.c_str(), list(d0.split).c_str(), d0.makespan, d0.bubble, d0.stage_bubble, d1.makespan, d1.bubble,
          d1.stage_bubble, list(b0.split).c_str(), b0.makespan, b0.bubble, b0.stage_bubble, b1.makespan, b1.bubble,
          b1.stage_bubble, d1.makespan / b1.makespan);
      if (const double gap = derived_cost_gap(path, text.str()); gap > 0.01) {
        std::printf(
            "|  | note: the deck's own cost lists differ from the derived ones by up to %.0f%% on a rank "
            "(a cost the model dimensions do not describe, e.g. an encoder stage): the row is not that deck's "
            "workload |\n",
            100 * gap);
      }
    } catch (const InputError& e) {
      std::printf("| %s | n/a: %s |\n", path.c_str(), e.what());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--split") == 0) {
    std::vector<std::string> decks(argv + 2, argv + argc);
    if (decks.empty()) {
      decks = {"inputs/gpt3-1.5b.yaml", "inputs/gpt3-6.2b.yaml", "inputs/gpt3-14.6b.yaml", "inputs/multimodal.yaml"};
    }
    split_table(decks);
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool speed_only = argc > 1 && std::strcmp(argv[1], "--speed") == 0;
  std::printf("## speed (lognormal 10%% noise; CPU seconds)\n\n");
  for (const char* kind : {"1f1b", "zb-h1", "zb-2p", "zb-v"}) {
    speed(kind, 64, 512, sched::Execution::Strict, sched::Hint::Schedule, 5);
    speed(kind, 64, 512, sched::Execution::Readiness, sched::Hint::BFW, 5);
    speed(kind, 64, 512, sched::Execution::Readiness, sched::Hint::Backfill, 5);
  }
  if (!quick) {
    speed("1f1b", 1024, 4096, sched::Execution::Strict, sched::Hint::Schedule, 1);
    speed("zb-h1", 1024, 4096, sched::Execution::Readiness, sched::Hint::BFW, 1);
  }
  if (speed_only) return 0;
  table(8, 24, 5, 4);
  table(8, 64, 5, 4);
  return 0;
}
