// Simulator benchmark: (1) speed in events (ops) per second at p=64, m=512 and p=1024, m=4096;
// (2) the table: every schedule x noise level (0, 5%, 10%, 20% lognormal jitter) x {strict, readiness
// with each hint} at p=8, m=24 and m=64: bubble ratio (global), per-stage bubble (the Zero Bubble paper's) and
// makespan / lower bound, averaged over seeds x steps.
// Usage: bench_sim [--quick | --speed]   (--quick skips p=1024; --speed runs only part 1)
// Times are CPU seconds of this process (std::clock), so a loaded shared machine does not inflate them.
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"

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

}  // namespace

int main(int argc, char** argv) {
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
