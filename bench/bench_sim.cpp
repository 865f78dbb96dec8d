// Simulator benchmark: (1) speed in events (ops) per second at p=64, m=512 and p=1024, m=4096;
// (2) the table: every schedule x noise level (0, 5%, 10%, 20% lognormal jitter) x {strict, readiness
// with each hint} at p=8, m=24 and m=64: bubble ratio (global), per-stage bubble (the Zero Bubble paper's) and
// makespan / lower bound, averaged over seeds x steps.
// (3) with --split DECK...: each deck under ZB-2p strict with its own layer split vs model.layers_per_stage:
// balanced (costs derived from the model: cost.device_tflops=150, what the shipped GPT-3 decks' cost lists were
// computed with), noise-free and under 10% Gaussian jitter (inputs/noise/jitter10.yaml, 5 seeds x 20 steps).
// (4) --grid: issue 13's grid, readiness against strict execution of the same schedule on the real decks
// (inputs/gpt3-{1.5b,6.2b,14.6b}.yaml, inputs/multimodal.yaml) x {1f1b, 1f1b-interleaved (v 2), zb-h1, zb-2p} x
// noise {none, jitter10, straggler, congestion} (inputs/noise/*.yaml), mean makespan over 5 seeds x 10 steps;
// then heavy variability (lognormal sigma 1.0; congestion p 0.5, delay 2F) and p=64 / p=1024 bubbles.
// (5) --migration [DECK...]: the paper's ablation (ZB-2p strict; + global tier; + migration; both) under 10% Gaussian
// jitter and a straggler drawn per step, on the deck's split and the balanced split: makespan, gains (over the
// split's and the balanced split's ZB-2p strict), the ratio to the balanced-work bound, both bubbles, bytes per step,
// decision cost per op, CPU time over migration off; then issue 14's goals, met or not. KEY=VALUE arguments are
// added to every migration row
// (--migration inputs/gpt3-1.5b.yaml migration.weights=replicas).
// (6) --scale P M [STEPS]: only the at-scale rows of (4) (1f1b, zb-h1, zb-2p, zb-v bubbles, strict / bfw /
// backfill) for one (p, m); STEPS defaults to 5 (1 for p >= 1024).
// (7) --heavy [INPUTS_DIR]: only the heavy-variability rows of (4), with a weaker baseline next to strict:
// `blocking`, the same fixed order with blocking neighbour exchanges (Megatron-style p2p, the kind of baseline
// RRFP measured against; docs/design.md), and readiness's speedup over it. strict stays the goals' baseline.
// (5b) --migration-run DECK NOISE [KEY=VALUE...]: one simulation row of (5) (NOISE: jitter or straggler, the
// keys added; no global tier), for a profiler.
// (8) --zb-table: ZB-1p / ZB-2p against the Zero Bubble paper's Table 5 on its twelve configurations (Table 9's
// costs), and ZB-V against its Table 8 (docs/schedules.md).
// (9) --schedules [DECK...]: migration's gain under ZB-2p, ZB-1p, 1F1B-interleaved and 1F1B (10% jitter, deck and
// balanced splits), beside the Conductor paper's Megatron-LM throughput table (docs/migration.md).
// (10) --wide: issue 13's first goal beyond the decks: backfill over strict for every generator x p in
// {4, 8, 16, 32, 64} x m in {p, 2p, 4p} x four cost shapes (uniform, W < F, comm = F, a heavy last stage) x the
// grid's noises, 3 seeds x 5 steps; the cells below the goal, the lowest five.
// Usage: kUsage below (bench_sim --help prints it).
// Times are CPU seconds of this process (std::clock), so a loaded shared machine does not inflate them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench_main.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/sim/control_loop.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/order_bound.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/util/error.hpp"
#include "zb_paper.hpp"

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
  const sched::Schedule s = sched::generate(kind, p, m, plan::v_shaped_kind(kind) ? 2 : 1, cost);
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
  const std::vector<std::string> kinds = {"gpipe", "1f1b", "1f1b-interleaved", "zb-h1",    "zb-h2", "zb-1p",
                                          "zb-2p", "zb-v", "zb-v-greedy",      "dualpipev"};
  for (const auto& kind : kinds) {
    const int v = plan::v_shaped_kind(kind) || kind == "1f1b-interleaved" ? 2 : 1;
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

// ---- (3) the grid on the real decks ----

struct GridNoise {
  std::string name;
  std::vector<std::string> overrides;  // the overlay's keys (inputs/noise/*.yaml), the seed added per run
};

const std::vector<GridNoise>& grid_noises() {
  static const std::vector<GridNoise> n = {
      {"none", {"noise.kind=[none]", "noise.level=0"}},
      {"jitter10", {"noise.kind=[gaussian]", "noise.level=0.10"}},
      {"straggler",
       {"noise.kind=[gaussian,straggler]", "noise.level=0.05", "noise.straggler_rank=-1",
        "noise.straggler_factor=1.5"}},
      {"congestion",
       {"noise.kind=[congestion]", "noise.level=0.5", "noise.congestion_prob=0.2", "noise.congestion_burst=4",
        "noise.congestion_delay=-1"}},
  };
  return n;
}

std::string read_text(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "bench_sim: cannot read %s (run from the repository root, or pass the inputs folder)\n",
                 path.c_str());
    std::exit(2);
  }
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

// A deck under overrides with one noise seed, `steps` steps and no trace: one cell's run of the tables below.
plan::Plan seeded_plan(const std::string& path, const std::string& text, const std::vector<std::string>& overrides,
                       int seed, int steps) {
  config::LoadOptions o;
  o.command = config::Command::Simulate;
  o.source_name = path;
  o.overrides = overrides;
  o.overrides.push_back("noise.seed=" + std::to_string(seed));
  o.overrides.push_back("run.steps=" + std::to_string(steps));
  o.overrides.push_back("trace.enabled=false");
  return config::resolve(config::parse_deck(text, o));
}

// Mean makespan (ms) of a deck under overrides, over seeds x steps; with `order_bound`, also the mean of the steps'
// order bounds (sim/order_bound.hpp), computed by the same runs.
double deck_makespan(const std::string& path, const std::string& text, std::vector<std::string> overrides, int seeds,
                     int steps, double* order_bound = nullptr) {
  double sum = 0, bound = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    const plan::Plan plan = seeded_plan(path, text, overrides, seed, steps);
    const sched::Schedule schedule = sched::make_schedule(plan);
    sim::SimOptions options = sim::SimOptions::from_plan(plan, schedule);
    options.order_bound = order_bound != nullptr;
    const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, schedule);
    const sim::RunResult r = sim::simulate_run(schedule, noise, options, steps);
    sum += r.mean_makespan_ms;
    bound += r.mean_order_bound_ms;
  }
  if (order_bound) *order_bound = bound / seeds;
  return sum / seeds;
}

// ---- a weaker fixed-order baseline: blocking exchanges (RRFP's kind of baseline, docs/design.md) ----

// One step of the schedule run in fixed list order with blocking exchanges, as Megatron-style pipelines do:
// before each op a rank makes one blocking exchange with its neighbours, sending the output of its previous op
// (if it goes to another rank) and receiving this op's input (if it comes from another rank); the op starts when
// the exchange's transfers have completed. With `rendezvous` a transfer starts only when both ends have entered
// their exchanges (the receiver posts its receive when it reaches the consumer in its list), so a late rank holds
// up its senders as well as its receivers. Without it, receives are posted when the step begins and sends never
// block: that is our strict execution (the check in blocking_baseline()). Returns the makespan (last op end - first
// op start, as the simulator's), or NaN if the lists deadlock under blocking exchanges.
double fixed_order_makespan(const sched::Schedule& s, const sim::NoiseModel& noise, int step, bool rendezvous) {
  const int p = s.p;
  std::vector<sched::Arbiter> ranks;
  for (int r = 0; r < p; ++r) ranks.emplace_back(s, r, 0.0, 0.0);
  const auto producer = [&](const sched::Transfer& t) {
    const sched::Arbiter& a = ranks[static_cast<std::size_t>(t.from_rank)];
    return t.payload == sched::Payload::Activation ? a.index_of(sched::OpKind::F, t.from_chunk, t.microbatch)
                                                   : a.backward_index(t.from_chunk, t.microbatch);
  };
  // entry[r][k]: when rank r enters the exchange before its op k (k = n: the last op's send); pos[r]: the
  // exchanges rank r has entered, minus one.
  std::vector<std::vector<double>> entry(p);
  std::vector<int> pos(p, 0);
  for (int r = 0; r < p; ++r) entry[r].assign(s.ranks[r].size() + 1, 0.0);
  double first = std::numeric_limits<double>::infinity();
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& list = s.ranks[r];
      const int n = static_cast<int>(list.size());
      for (int k = pos[r]; k <= n; k = pos[r]) {
        const double in = entry[r][k];
        double exit = in;
        if (k > 0) {  // the previous op's output
          const auto out = sched::output_of(s, r, list[k - 1]);
          if (rendezvous && out && !out->local()) {
            const int j = ranks[out->to_rank].consumer_of(*out);
            if (pos[out->to_rank] < j) break;  // the receiver has not reached it
            exit = std::max(exit, std::max(in, entry[out->to_rank][j]) + noise.comm_time_ms(step, *out));
          }
        }
        if (k < n) {  // this op's input
          if (const auto t = sched::input_of(s, r, list[k]); t && !t->local()) {
            const int i = producer(*t);
            if (pos[t->from_rank] < i + 1) break;  // the sender has not finished it
            const double sent = entry[t->from_rank][i + 1];
            exit = std::max(exit, (rendezvous ? std::max(sent, in) : sent) + noise.comm_time_ms(step, *t));
          }
        }
        pos[r] = k + 1;
        progress = true;
        if (k == n) break;
        if (k == 0) first = std::min(first, exit);
        const sched::Action& a = list[k];
        entry[r][k + 1] = exit + noise.compute_time_ms(step, r, a.chunk, a.microbatch, a.kind);
      }
    }
  }
  double last = 0.0;
  for (int r = 0; r < p; ++r) {
    if (pos[r] <= static_cast<int>(s.ranks[r].size())) return std::numeric_limits<double>::quiet_NaN();
    last = std::max(last, entry[r].back());
  }
  return last - first;
}

// The blocking baseline's mean makespan on a deck under overrides (seeds x steps as deck_makespan). Its
// non-blocking twin must reproduce the simulator's strict makespan, or the comparison is not like for like.
double blocking_baseline(const std::string& path, const std::string& text, std::vector<std::string> overrides,
                         int seeds, int steps, double strict) {
  double sum = 0, twin = 0;
  for (int seed = 1; seed <= seeds; ++seed) {
    const plan::Plan plan = seeded_plan(path, text, overrides, seed, steps);
    const sched::Schedule schedule = sched::make_schedule(plan);
    const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, schedule);
    for (int step = 0; step < steps; ++step) {
      sum += fixed_order_makespan(schedule, noise, step, true) / (seeds * steps);
      twin += fixed_order_makespan(schedule, noise, step, false) / (seeds * steps);
    }
  }
  if (std::abs(twin - strict) > 1e-6 * strict) {
    std::fprintf(stderr, "bench_sim: the non-blocking twin gives %.6f ms, the simulator's strict %.6f ms\n", twin,
                 strict);
  }
  return sum;
}

struct Modes {
  double strict = 0, bfw = 0, backfill = 0, critical = 0;
  double order_bound = 0;  // the strict runs' mean order bound (the same draws in every mode): no order is faster
};

Modes three_modes(const std::string& path, const std::string& text, const std::vector<std::string>& base, int seeds,
                  int steps) {
  auto with = [&](const char* execution, const char* hint, double* order_bound = nullptr) {
    std::vector<std::string> o = base;
    o.push_back(std::string("schedule.execution=") + execution);
    o.push_back(std::string("schedule.hint=") + hint);
    return deck_makespan(path, text, o, seeds, steps, order_bound);
  };
  Modes m;
  m.strict = with("strict", "schedule", &m.order_bound);
  m.bfw = with("readiness", "bfw");
  m.backfill = with("readiness", "backfill");
  m.critical = with("readiness", "critical");
  return m;
}

std::vector<std::string> kind_overrides(const std::string& kind) {
  const bool interleaved = kind == "1f1b-interleaved";
  std::vector<std::string> o = {"schedule.kind=" + kind, std::string("parallel.virtual=") + (interleaved ? "2" : "1")};
  // The decks split their layers over their 8 stages by a list (the language decks unevenly, multimodal with the
  // encoder on stage 0), which 16 virtual stages cannot take: evenly then. Their costs are per-rank lists, which a
  // rank's chunks share, so the split changes no op time.
  if (interleaved) o.push_back("model.layers_per_stage=even");
  return o;
}

const std::vector<std::string> kGridDecks = {"gpt3-1.5b", "gpt3-6.2b", "gpt3-14.6b", "multimodal"};
const std::vector<std::string> kGridKinds = {"1f1b", "1f1b-interleaved", "zb-h1", "zb-2p"};

void grid(const std::string& inputs) {
  const int seeds = 5, steps = 10;
  std::printf(
      "## grid: readiness vs strict on the decks (mean makespan ms over %d seeds x %d steps; speedup = strict / "
      "readiness)\n\n| deck | schedule | noise | strict | bfw | backfill | critical | bfw x | backfill x | critical x "
      "|\n|---|---|---|---|---|---|---|---|---|---|\n",
      seeds, steps);
  int below998[3] = {0, 0, 0}, below1_free[3] = {0, 0, 0}, cells = 0;
  double lo[3] = {1e9, 1e9, 1e9}, hi[3] = {0, 0, 0};
  for (const auto& deck : kGridDecks) {
    const std::string path = inputs + "/" + deck + ".yaml";
    const std::string text = read_text(path);
    for (const auto& kind : kGridKinds) {
      for (const auto& noise : grid_noises()) {
        std::vector<std::string> base = kind_overrides(kind);
        base.insert(base.end(), noise.overrides.begin(), noise.overrides.end());
        const Modes m = three_modes(path, text, base, noise.name == "none" ? 1 : seeds, steps);
        const double x[3] = {m.strict / m.bfw, m.strict / m.backfill, m.strict / m.critical};
        for (int k = 0; k < 3; ++k) {
          below998[k] += x[k] < 0.998;
          below1_free[k] += noise.name == "none" && x[k] < 1.0;
          lo[k] = std::min(lo[k], x[k]);
          hi[k] = std::max(hi[k], x[k]);
        }
        ++cells;
        std::printf("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f |\n", deck.c_str(), kind.c_str(),
                    noise.name.c_str(), m.strict, m.bfw, m.backfill, m.critical, x[0], x[1], x[2]);
        std::fflush(stdout);
      }
    }
  }
  std::printf(
      "\n%d cells. bfw: %d below 0.998, %d noise-free below 1.000, speedup %.3f .. %.3f. backfill: %d below 0.998, "
      "%d noise-free below 1.000, speedup %.3f .. %.3f. critical: %d below 0.998, %d noise-free below 1.000, "
      "speedup %.3f .. %.3f\n",
      cells, below998[0], below1_free[0], lo[0], hi[0], below998[1], below1_free[1], lo[1], hi[1], below998[2],
      below1_free[2], lo[2], hi[2]);
}

// ---- (10) --wide: issue 13's first goal beyond the decks ----

// The cost keys of one of the goal's cost shapes at pipeline size p: uniform, W < F, comm-heavy (comm = F), and a
// heavy last stage (the last rank 1.5x F and B, 1.2x W).
std::vector<std::string> shape_costs(const std::string& shape, int p) {
  const auto last = [p](double others, double last_one) {
    std::string list = "[";
    for (int r = 0; r < p; ++r) {
      if (r) list += ',';
      list += std::to_string(r + 1 < p ? others : last_one);
    }
    return list + "]";
  };
  if (shape == "uniform") return {"cost.forward=1", "cost.backward_input=1", "cost.backward_weight=1", "cost.comm=0"};
  if (shape == "W<F") return {"cost.forward=1", "cost.backward_input=1", "cost.backward_weight=0.5", "cost.comm=0"};
  if (shape == "comm=F") return {"cost.forward=1", "cost.backward_input=1", "cost.backward_weight=1", "cost.comm=1"};
  return {"cost.forward=" + last(1, 1.5), "cost.backward_input=" + last(1, 1.5), "cost.backward_weight=" + last(1, 1.2),
          "cost.comm=0.02"};
}

// Every generator x p in {4, 8, 16, 32, 64} x m in {p, 2p, 4p} x four cost shapes x the grid's noises, on a deck
// of cost keys alone: the default readiness policy (backfill) over strict, mean of 3 seeds x 5 steps (noise-free:
// one). Prints the cells below the goal (0.998, noise-free 1.000 to 1e-9), the five lowest, the count and the refusals
// (a generator that has no schedule for the shape, e.g. dualpipev with m < 2p).
void wide() {
  const int seeds = 3, steps = 5;
  const std::string text = "run: {name: wide}\n";
  const std::vector<std::string> kinds = {"gpipe", "1f1b", "1f1b-interleaved", "zb-h1",    "zb-h2", "zb-1p",
                                          "zb-2p", "zb-v", "zb-v-greedy",      "dualpipev"};
  struct Cell {
    double x;
    std::string name;
  };
  std::vector<Cell> cells;
  int below = 0, refused = 0;
  std::printf("## wide grid: backfill (default) over strict, mean makespan over %d seeds x %d steps\n\n", seeds, steps);
  for (const std::string& kind : kinds) {
    const bool two = kind == "1f1b-interleaved" || kind == "zb-v" || kind == "zb-v-greedy" || kind == "dualpipev";
    for (int p : {4, 8, 16, 32, 64}) {
      for (int m : {p, 2 * p, 4 * p}) {
        for (const char* shape : {"uniform", "W<F", "comm=F", "heavy last"}) {
          for (const auto& noise : grid_noises()) {
            std::vector<std::string> o = {"schedule.kind=" + kind, "parallel.pipeline=" + std::to_string(p),
                                          "parallel.microbatches=" + std::to_string(m),
                                          std::string("parallel.virtual=") + (two ? "2" : "1")};
            for (const std::string& c : shape_costs(shape, p)) o.push_back(c);
            o.insert(o.end(), noise.overrides.begin(), noise.overrides.end());
            const bool free = noise.name == "none";
            const auto with = [&](const char* execution) {
              std::vector<std::string> e = o;
              e.push_back(std::string("schedule.execution=") + execution);
              return deck_makespan("wide", text, e, free ? 1 : seeds, steps);
            };
            char name[160];
            std::snprintf(name, sizeof name, "%s p=%d m=%d %s %s", kind.c_str(), p, m, shape, noise.name.c_str());
            double x = 0;
            try {
              x = with("strict") / with("readiness");
            } catch (const InputError&) {
              ++refused;
              continue;
            }
            cells.push_back({x, name});
            // A noise-free tie may differ in the last bits: op times summed in another order (1e-9: a tie).
            if (x < (free ? 1.0 - 1e-9 : 0.998)) {
              ++below;
              std::printf("below the goal: %s: %.9f\n", name, x);
            }
          }
        }
      }
    }
  }
  std::sort(cells.begin(), cells.end(), [](const Cell& a, const Cell& b) { return a.x < b.x; });
  std::printf("\nlowest:\n");
  for (std::size_t i = 0; i < cells.size() && i < 5; ++i)
    std::printf("  %.4f  %s\n", cells[i].x, cells[i].name.c_str());
  std::printf("\n%zu cells (%d refused by their generator): %d below the goal (0.998; noise-free 1.000)\n",
              cells.size(), refused, below);
}

void heavy(const std::string& inputs) {
  const int seeds = 5, steps = 10;
  std::printf(
      "\n## heavy variability (mean makespan ms over %d seeds x %d steps; speedup = strict / readiness; goal: "
      ">= 1.15x language, >= 1.5x multimodal; blocking: the fixed order with blocking exchanges, RRFP's kind of "
      "baseline, not ours; ceiling x: strict / the step's order bound (sim/order_bound.hpp: per rank, the earliest "
      "its first input can arrive + its work + the shortest chain after it, on the step's dependency graph with the "
      "same draws; memory left out), more than any order of the same draws can gain)\n\n| deck | schedule | noise | "
      "strict | bfw | backfill | critical | bfw x | backfill x | "
      "critical x | ceiling x | blocking | bfw x blocking | backfill x blocking | critical x blocking "
      "|\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
      seeds, steps);
  const std::vector<GridNoise> noises = {
      {"lognormal 1.0", {"noise.kind=[lognormal]", "noise.level=1.0"}},
      // Per-sample: one factor per microbatch on every stage (RRFP's multimodal variability, correlated along the
      // pipeline), against lognormal's independent draws per op.
      {"sample 1.0", {"noise.kind=[sample]", "noise.level=1.0"}},
      {"congestion p0.5 2F",
       {"noise.kind=[congestion]", "noise.level=2", "noise.congestion_prob=0.5", "noise.congestion_delay=-1"}},
  };
  for (const auto& deck : kGridDecks) {
    const std::string path = inputs + "/" + deck + ".yaml";
    const std::string text = read_text(path);
    for (const auto& kind : kGridKinds) {
      for (const auto& noise : noises) {
        std::vector<std::string> base = kind_overrides(kind);
        base.insert(base.end(), noise.overrides.begin(), noise.overrides.end());
        const Modes m = three_modes(path, text, base, seeds, steps);
        const double blk = blocking_baseline(path, text, base, seeds, steps, m.strict);
        std::printf("| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.3f | %.3f | %.3f | %.3f |", deck.c_str(),
                    kind.c_str(), noise.name.c_str(), m.strict, m.bfw, m.backfill, m.critical, m.strict / m.bfw,
                    m.strict / m.backfill, m.strict / m.critical, m.strict / m.order_bound);
        if (std::isnan(blk)) {
          std::printf(" deadlock: its lists need lookahead exchanges | | | |\n");  // interleaved (Megatron's own)
        } else {
          std::printf(" %.1f | %.3f | %.3f | %.3f |\n", blk, blk / m.bfw, blk / m.backfill, blk / m.critical);
        }
        std::fflush(stdout);
      }
    }
  }
}

void at_scale_header() {
  std::printf(
      "\n## at scale (F = B = W = 1, comm 0.05, lognormal 10%%; bubble ratio, and the simulator's CPU time per op, "
      "which bounds the arbitration cost)\n\n| schedule | p | m | strict | bfw | backfill | critical "
      "|\n|---|---|---|---|---|---|---|\n");
}

// Bubble ratios at scale (uniform costs as part 1, lognormal 10%) and the simulator's CPU time per op.
void at_scale(int p, int m, int steps) {
  const sched::CostModel cost = sched::uniform_cost(1.0, 1.0, 1.0, 0.05, 0.5);
  for (const char* kind : {"1f1b", "zb-h1", "zb-2p", "zb-v"}) {
    const int v = std::strcmp(kind, "zb-v") == 0 ? 2 : 1;
    const sched::Schedule s = sched::generate(kind, p, m, v, cost);
    const sim::NoiseModel noise(s, cost, lognormal(0.1, 1));
    std::printf("| %s | %d | %d |", kind, p, m);
    for (auto [ex, hint] : {std::pair{sched::Execution::Strict, sched::Hint::Schedule},
                            std::pair{sched::Execution::Readiness, sched::Hint::BFW},
                            std::pair{sched::Execution::Readiness, sched::Hint::Backfill},
                            std::pair{sched::Execution::Readiness, sched::Hint::Critical}}) {
      sim::SimOptions o;
      o.execution = ex;
      o.hint = hint;
      o.memory_limit = sched::default_memory_limit(kind, p, m, v);
      const std::clock_t t0 = std::clock();
      const sim::RunResult r = sim::simulate_run(s, noise, o, steps);
      const double ns_per_op = cpu_seconds_since(t0) * 1e9 / (static_cast<double>(s.num_actions()) * steps);
      std::printf(" %.4f (%.0f ns/op) |", r.mean_bubble_ratio, ns_per_op);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
}

// ---- (5) computation migration (docs/migration.md): the paper's ablation ----

struct MigRow {
  double makespan = 0, bubble = 0, stage_bubble = 0, bytes = 0, migrated = 0, cpu_s = 0, ops = 0;
  double bound = 0;  // the split's balanced-work bound (noise-free), balanced_work_bound
};

// A noise preset of the ablation: the keys, and how many independent runs of how many steps are averaged.
struct MigNoise {
  const char* name;
  std::vector<std::string> keys;
  int seeds, steps;
  bool jitter;  // the 10% jitter preset (the goals' default noise)
};

// 10% jitter (5 seeds x 20 steps, the issue's); a straggler drawn per step: one rank 1.5x slower on top of 5%
// jitter (inputs/noise/straggler.yaml). The noise model draws the straggler's rank from the seed, once per run, so
// 100 one-step runs draw it 100 times: as many drawn steps as 5 seeds x 20 steps (synchronous steps are
// independent but for the global tier's replanning, which cannot foresee a rank drawn anew each step).
const std::vector<MigNoise>& mig_noises() {
  static const std::vector<MigNoise> n = {{"jitter 10%", {"noise.kind=gaussian", "noise.level=0.1"}, 5, 20, true},
                                          {"straggler 1.5x per step",
                                           {"noise.kind=[gaussian, straggler]", "noise.level=0.05",
                                            "noise.straggler_factor=1.5", "noise.straggler_rank=-1"},
                                           100,
                                           1,
                                           false}};
  return n;
}

// Issue 14's balanced-work bound: the step's total work spread evenly over the p ranks plus the pipeline fill (the
// first microbatch's forwards and transfers up to the last stage), noise-free. No order of the deck's split beats
// its heaviest stage's work + fill; only moving work between ranks can approach this bound.
double balanced_work_bound(const plan::Plan& plan) {
  const sched::CostModel c(plan.costs);
  const int p = plan.pipeline.p;
  double work = 0, fill = 0;
  for (int r = 0; r < p; ++r) work += plan.pipeline.m * c.work_per_microbatch(r);
  for (int r = 0; r + 1 < p; ++r) fill += c.op_time(r, sched::OpKind::F, 1) + c.comm_time();
  return work / p + fill;
}

// The deck under `kind` (ZB-2p unless said) strict with `overrides`, mean over the noise's seeds x steps; with
// `global` the global tier (scheduler.kind=ppo, the shipped policy) replans after every step, as `conductor
// simulate` runs it. CPU time of the simulation alone (deck loading excluded; without the global tier the least
// of three runs).
MigRow mig_run(const std::string& path, const std::string& text, const std::vector<std::string>& overrides,
               const MigNoise& noise_preset, bool global, const std::string& kind = "zb-2p") {
  MigRow row;
  const int seeds = noise_preset.seeds, steps = noise_preset.steps;
  for (int seed = 1; seed <= seeds; ++seed) {
    config::LoadOptions o;
    o.source_name = path;
    o.command = config::Command::Simulate;
    o.overrides = overrides;
    for (const std::string& k :
         {"schedule.kind=" + kind, std::string("schedule.execution=strict"), std::string("trace.enabled=false"),
          "run.steps=" + std::to_string(steps), "noise.seed=" + std::to_string(seed)})
      o.overrides.push_back(k);
    o.overrides.insert(o.overrides.end(), noise_preset.keys.begin(), noise_preset.keys.end());
    if (global) o.overrides.push_back("scheduler.kind=ppo");
    const plan::Plan plan = config::resolve(config::parse_deck(text, o));
    const sched::Schedule s = sched::make_schedule(plan);
    const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, s);
    const sim::SimOptions options = sim::SimOptions::from_plan(plan, s);
    row.bound = balanced_work_bound(plan);
    sim::RunResult r;
    if (global) {
      const std::clock_t t0 = std::clock();
      const auto planner = cli::planner_factory(plan)(s);
      r = sim::simulate_with_planner(noise, options, steps, *planner).run;
      row.cpu_s += cpu_seconds_since(t0);
    } else {
      // The least of three runs (the same result each time): a one-step run takes well under a millisecond, so
      // one timing on a shared machine is mostly noise.
      double cpu = std::numeric_limits<double>::infinity();
      for (int repeat = 0; repeat < 3; ++repeat) {
        const std::clock_t t0 = std::clock();
        r = sim::simulate_run(s, noise, options, steps);
        cpu = std::min(cpu, cpu_seconds_since(t0));
      }
      row.cpu_s += cpu;
    }
    row.ops += static_cast<double>(s.num_actions()) * steps;
    row.makespan += r.mean_makespan_ms / seeds;
    row.bubble += r.mean_bubble_ratio / seeds;
    row.stage_bubble += r.mean_stage_bubble_ratio / seeds;
    row.bytes += r.mean_migration_bytes / seeds;
    row.migrated += r.mean_migrated_ops / seeds;
  }
  return row;
}

// The local tier's settings of the ablation: NVLink with bf16 tensors (the decks model bf16 work at 150 TFLOP/s
// while the emulated backend is fp32), at most `helpers` peers per op.
std::vector<std::string> mig_keys(int helpers) {
  return {"migration.enabled=true", "migration.link=nvlink", "migration.element_bytes=2",
          "migration.helpers=" + std::to_string(helpers)};
}

// The best row of one kind for a goal, and where it was found.
struct MigBest {
  double value = std::numeric_limits<double>::quiet_NaN();
  std::string where;
  // Keep `v` when it is better than the kept one (`larger`: higher is better).
  void offer(double v, const std::string& at, bool larger) {
    if (std::isnan(value) || (larger ? v > value : v < value)) value = v, where = at;
  }
};

// Issue 14's goals for one deck, from its ablation rows (migration rows: "+ migration" and "both").
struct MigGoals {
  MigBest bound;               // jitter, deck split with deck costs: makespan / balanced-work bound (<= 1.05)
  MigBest jitter_balanced;     // jitter, balanced split: gain over its ZB-2p strict (>= 1.03; multimodal 1.2)
  MigBest jitter_deck;         // jitter, deck split (deck costs): balanced ZB-2p strict / the row (the same goals)
  MigBest straggler_balanced;  // straggler: gain over the balanced split's ZB-2p strict (>= 1.10)
  MigBest straggler_deck;      // straggler, deck split: balanced ZB-2p strict / the row
  MigBest stage_bubble;        // jitter, both tiers, any split: per-stage bubble (<= 0.02)
  MigBest decision;            // the largest decision cost per op of a "+ migration" row (< 10 us)
  MigBest cpu;                 // the largest CPU time of a "+ migration" row over its ZB-2p strict's (<= 1.5)
  void print(const std::string& deck) const {
    const bool language = deck.find("multimodal") == std::string::npos;
    const double target = language ? 1.03 : 1.2;
    auto line = [](const char* goal, const MigBest& b, bool met, const char* fmt) {
      std::printf("- %s: ", goal);
      std::printf(fmt, b.value);
      std::printf(" (%s): %s\n", b.where.c_str(), met ? "met" : "NOT met");
    };
    std::printf("\nGoals, %s (best row of the migration and both rows):\n", deck.c_str());
    if (language) line("deck split, jitter: makespan / bound <= 1.05", bound, bound.value <= 1.05, "%.3f");
    const std::string g = "vs balanced ZB-2p strict, jitter >= " + std::string(language ? "1.03x" : "1.2x");
    line((g + ", balanced split").c_str(), jitter_balanced, jitter_balanced.value >= target, "%.3fx");
    line((g + ", deck split").c_str(), jitter_deck, jitter_deck.value >= target, "%.3fx");
    line("vs balanced ZB-2p strict, straggler >= 1.10x, balanced split", straggler_balanced,
         straggler_balanced.value >= 1.10, "%.3fx");
    line("vs balanced ZB-2p strict, straggler >= 1.10x, deck split", straggler_deck, straggler_deck.value >= 1.10,
         "%.3fx");
    line("per-stage bubble, both tiers, jitter <= 0.02 (lowest)", stage_bubble, stage_bubble.value <= 0.02, "%.4f");
    line("decision cost < 10 us/op (largest)", decision, decision.value < 10, "%.2f us");
    line("simulator CPU time within 1.5x of migration off (largest)", cpu, cpu.value <= 1.5, "%.2fx");
    std::printf("\n");
    std::fflush(stdout);
  }
};

// extra: keys added to every row with migration (e.g. migration.weights=replicas).
void migration_table(const std::vector<std::string>& decks, const std::vector<std::string>& extra) {
  std::string keys;
  for (const std::string& k : extra) keys += " " + k;
  std::printf(
      "## the paper's ablation: ZB-2p strict; + global tier (scheduler.kind=ppo, the shipped policy); + migration "
      "(NVLink, bf16 tensors, migration.helpers=H%s); both. Gain = the split's ZB-2p strict makespan / the row's; vs "
      "balanced = the balanced split's ZB-2p strict / the row's; / bound = the row's makespan / the split's "
      "balanced-work bound (total work / p + fill, noise-free); decision cost = (CPU time with migration - without) "
      "/ ops; CPU x = the simulation's CPU time / the same row without migration (both: the policy's time "
      "dominates, not reported); MB/step includes replica "
      "refreshes. Derived = cost.device_tflops=150.%s\n\n"
      "| deck | noise | split | method | makespan ms | gain | vs balanced | / bound | bubble | per-stage bubble "
      "| migrated ops/step | MB/step | decision cost us/op | CPU x |\n|---|---|---|---|---|---|---|---|---|---|---|---|"
      "---|---|\n",
      keys.c_str(),
#if CONDUCTOR_HAVE_POLICY
      ""
#else
      " This build has no global tier (-DCONDUCTOR_POLICY=OFF): its rows are left out."
#endif
  );
  for (const std::string& path : decks) {
    const std::string text = read_text(path);
    const std::vector<std::pair<std::string, std::vector<std::string>>> splits = {
        {"deck, deck costs", {}},
        {"deck, derived", {"cost.device_tflops=150"}},
        {"balanced, derived", {"cost.device_tflops=150", "model.layers_per_stage=balanced"}}};
    MigGoals goals;
    mig_run(path, text, splits.back().second, mig_noises().front(), false);  // warm-up: the first run is slower
    for (const MigNoise& noise : mig_noises()) {
      const MigRow balanced = mig_run(path, text, splits.back().second, noise, false);
      for (const auto& [split, base] : splits) {
        MigRow off;
        int p = 0;
        try {
          config::LoadOptions o;
          o.command = config::Command::Simulate;
          o.overrides = base;
          p = config::parse_deck(text, o).parallel.pipeline;
          off = &split == &splits.back().first ? balanced : mig_run(path, text, base, noise, false);
        } catch (const InputError& e) {
          std::printf("| %s | %s | %s | n/a: %s |\n", path.c_str(), noise.name, split.c_str(), e.what());
          continue;
        }
        const bool deck_split = &split == &splits.front().first, balanced_split = &split == &splits.back().first;
        // base_row: the row without migration whose CPU time the decision cost is over (null: none).
        auto print = [&](const std::string& method, const MigRow& row, const MigRow* base_row) {
          std::printf("| %s | %s | %s | %s | %.1f | %.3fx | %.3fx | %.3f | %.4f | %.4f | %.1f | %.1f |", path.c_str(),
                      noise.name, split.c_str(), method.c_str(), row.makespan, off.makespan / row.makespan,
                      balanced.makespan / row.makespan, row.makespan / row.bound, row.bubble, row.stage_bubble,
                      row.migrated, row.bytes / 1e6);
          // The both rows' CPU time is mostly the policy's inference, which varies with its replanning: their
          // difference from the global tier's row is not the migration's cost (it came out negative), so only the
          // "+ migration" rows, over the same simulation without migration, report it.
          const bool both = method.rfind("both", 0) == 0;
          const bool timed = base_row && !both;
          if (timed) {
            std::printf(" %.2f | %.2f |\n", (row.cpu_s - base_row->cpu_s) / row.ops * 1e6, row.cpu_s / base_row->cpu_s);
          } else {
            std::printf(" | |\n");
          }
          std::fflush(stdout);
          if (!base_row) return;
          const std::string at = std::string(noise.name) + ", " + split + ", " + method;
          if (noise.jitter && deck_split) goals.bound.offer(row.makespan / row.bound, at, false);
          if (deck_split || balanced_split) {
            MigBest& gain = noise.jitter ? (deck_split ? goals.jitter_deck : goals.jitter_balanced)
                                         : (deck_split ? goals.straggler_deck : goals.straggler_balanced);
            gain.offer(balanced.makespan / row.makespan, at, true);
          }
          if (noise.jitter && both) goals.stage_bubble.offer(row.stage_bubble, at, false);
          if (!both) {
            goals.decision.offer((row.cpu_s - base_row->cpu_s) / row.ops * 1e6, at, true);
            goals.cpu.offer(row.cpu_s / base_row->cpu_s, at, true);
          }
        };
        auto with_helpers = [&](int h) {
          std::vector<std::string> o = base;
          for (const std::string& k : mig_keys(h)) o.push_back(k);
          o.insert(o.end(), extra.begin(), extra.end());
          return o;
        };
        const std::vector<int> helpers = {1, std::min(3, p - 1), p - 1};
        print("ZB-2p strict", off, nullptr);
        for (std::size_t k = 0; k < helpers.size(); ++k) {
          if (k > 0 && helpers[k] == helpers[k - 1]) continue;
          print("+ migration, H=" + std::to_string(helpers[k]),
                mig_run(path, text, with_helpers(helpers[k]), noise, false), &off);
        }
#if CONDUCTOR_HAVE_POLICY
        const MigRow global = mig_run(path, text, base, noise, true);
        print("+ global tier", global, nullptr);
        for (std::size_t k = 0; k < helpers.size(); ++k) {
          if (k > 0 && helpers[k] == helpers[k - 1]) continue;
          print("both, H=" + std::to_string(helpers[k]), mig_run(path, text, with_helpers(helpers[k]), noise, true),
                &global);
        }
#endif
      }
    }
    goals.print(path);
  }
}

// ---- (9) --schedules: migration's gain per schedule, beside the Conductor paper's Megatron-LM table ----

// The Conductor paper's "Megatron-LM throughput for computation balancing" (samples/GPU/s, schedule without /
// with its migration), for GPT-3 1.5B, 6.2B and 14.6B.
struct PaperThroughput {
  const char* deck;
  const char* kind;
  double off, on;
};
const std::vector<PaperThroughput>& paper_throughput() {
  static const std::vector<PaperThroughput> t = {{"gpt3-1.5b", "zb-2p", 14.5, 15.1},
                                                 {"gpt3-1.5b", "zb-1p", 12.9, 13.4},
                                                 {"gpt3-1.5b", "1f1b-interleaved", 13.1, 13.6},
                                                 {"gpt3-1.5b", "1f1b", 11.8, 13.0},
                                                 {"gpt3-6.2b", "zb-2p", 4.32, 4.51},
                                                 {"gpt3-6.2b", "zb-1p", 3.88, 4.02},
                                                 {"gpt3-6.2b", "1f1b-interleaved", 4.01, 4.16},
                                                 {"gpt3-6.2b", "1f1b", 3.50, 3.78},
                                                 {"gpt3-14.6b", "zb-2p", 1.81, 1.90},
                                                 {"gpt3-14.6b", "zb-1p", 1.61, 1.66},
                                                 {"gpt3-14.6b", "1f1b-interleaved", 1.54, 1.62},
                                                 {"gpt3-14.6b", "1f1b", 1.40, 1.57}};
  return t;
}

// Each language deck under the paper's four schedules, strict, 10% jitter (5 seeds x 20 steps), migration off and
// on (one helper per op, NVLink, bf16 tensors), on the deck's split and on the balanced one (derived costs: the
// interleaved schedule's 16 virtual stages take the layers evenly on both). Throughput = microbatches x
// microbatch size / (makespan x p). The paper's numbers are Megatron-LM runs on GPUs, ours the simulator's cost
// model: compare the gains, not the throughputs.
void schedules_table(const std::vector<std::string>& decks) {
  std::printf(
      "## migration's gain per schedule (10%% jitter, strict, derived costs cost.device_tflops=150; migration: "
      "NVLink, bf16 tensors, migration.helpers=1), beside the Conductor paper's Megatron-LM table (samples/GPU/s)"
      "\n\n| deck | schedule | split | off ms | on ms | samples/GPU/s off / on | gain | paper off / on | paper gain | "
      "migrated ops/step | GB/step |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& path : decks) {
    const std::string text = read_text(path);
    config::LoadOptions o;
    o.command = config::Command::Simulate;
    const config::Deck deck = config::parse_deck(text, o);
    const double samples = static_cast<double>(deck.parallel.microbatches) * deck.parallel.microbatch_size;
    const double p = deck.parallel.pipeline;
    const std::string name = std::filesystem::path(path).stem().string();
    for (const char* kind : {"zb-2p", "zb-1p", "1f1b-interleaved", "1f1b"}) {
      const bool interleaved = std::string(kind) == "1f1b-interleaved";
      for (const char* split : {"deck", "balanced"}) {
        std::vector<std::string> base = {"cost.device_tflops=150"};
        if (interleaved) {
          if (std::string(split) == "balanced") continue;  // the same even split
          base.insert(base.end(), {"parallel.virtual=2", "model.layers_per_stage=even"});
        } else if (std::string(split) == "balanced") {
          base.push_back("model.layers_per_stage=balanced");
        }
        std::vector<std::string> with = base;
        for (const std::string& k : mig_keys(1)) with.push_back(k);
        const MigRow off = mig_run(path, text, base, mig_noises().front(), false, kind);
        const MigRow on = mig_run(path, text, with, mig_noises().front(), false, kind);
        const auto throughput = [&](const MigRow& r) { return samples / (r.makespan * 1e-3 * p); };
        const auto paper =
            std::find_if(paper_throughput().begin(), paper_throughput().end(),
                         [&](const PaperThroughput& t) { return name == t.deck && kind == std::string(t.kind); });
        std::printf("| %s | %s | %s | %.1f | %.1f | %.2f / %.2f | %.3fx |", name.c_str(), kind,
                    interleaved ? "even (v=2)" : split, off.makespan, on.makespan, throughput(off), throughput(on),
                    off.makespan / on.makespan);
        if (paper != paper_throughput().end()) {
          std::printf(" %.2f / %.2f | %.3fx |", paper->off, paper->on, paper->on / paper->off);
        } else {
          std::printf(" | |");
        }
        std::printf(" %.1f | %.1f |\n", on.migrated, on.bytes / 1e9);
        std::fflush(stdout);
      }
    }
  }
}

// ---- (8) --zb-table: our ZB-1p / ZB-2p against the Zero Bubble paper's Table 5 ----
// Each configuration's Table 9 costs on every stage, M_W = M_B / 2 (memory_after_b 0.5, the authors' runtime
// setting), limits p and 2p M_B; the paper's measure: 1 - m (F + B + W) / the longest stage span. The 1F1B,
// ZB-H1, ZB-H2 columns check that the measure and costs reproduce the paper's own columns for fixed schedules.
double paper_bubble(const sched::Schedule& s, const sched::CostModel& cost) {
  sched::ExecOptions o;
  o.memory_after_b = cost.memory_after_b;
  o.record_ops = false;
  const sched::ExecResult r = sched::execute(
      s, o, [&cost, v = s.v](int rank, const sched::Action& a) { return cost.op_time(rank, a.kind, v); },
      [&cost](const sched::Transfer&) { return cost.comm; });
  double span = 0.0;
  for (int q = 0; q < s.p; ++q) span = std::max(span, r.last_end[q] - r.first_start[q]);
  return 1.0 - s.m * cost.work_per_microbatch(0) / span;
}

// ZB-V against the paper's Table 8 (section 6.2). The paper does not publish the costs behind that table (its
// ZB-V runs use other microbatch sizes than Table 9's), so the rows below take Table 9's costs of the same model
// (its smallest m) at Table 8's p and m: the comparison that holds is against ZB-H2 on the same costs (the paper:
// ZB-V at or below ZB-H2 on 6.2B and 28.3B, within 0.0012 above it on 14.6B) and the peak activation memory
// (ZB-V at 1F1B's p M_B, ZB-H2 at (2p - 1) M_B). Then the paper's claim for T_F = T_B = T_W: zero bubble at p M_B.
void zbv_table() {
  struct Row {
    int config;  // Table 9 row whose costs stand in
    int p, m;
    double h2, v;  // Table 8: ZB-H2, ZB-V
  };
  const Row rows[] = {{3, 16, 48, 0.0823, 0.0697}, {3, 16, 64, 0.0630, 0.0533},  {3, 16, 128, 0.0325, 0.0274},
                      {6, 24, 72, 0.0628, 0.0638}, {6, 24, 96, 0.0480, 0.0483},  {6, 24, 192, 0.0247, 0.0250},
                      {9, 32, 96, 0.0629, 0.0593}, {9, 32, 128, 0.0478, 0.0451}, {9, 32, 256, 0.0251, 0.0236}};
  std::printf(
      "\n## ZB-V vs the paper's Table 8 (costs: Table 9's for the model, see bench_sim.cpp)\n\n"
      "| model | p | m | ZB-H2 ours | ZB-V ours | ZB-V - ZB-H2 ours | paper ZB-H2 | paper ZB-V | paper ZB-V - ZB-H2 | "
      "ZB-V peak M_B | ZB-H2 peak M_B |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  auto peak = [](const sched::Schedule& s, double a) {
    const std::vector<double> pk = sched::list_peak_memory(s, a);
    return *std::max_element(pk.begin(), pk.end());
  };
  for (const Row& row : rows) {
    const auto& c = test_support::zb_paper_configs()[static_cast<std::size_t>(row.config)];
    const sched::CostModel cost = sched::uniform_cost(c.f, c.b, c.w, c.comm, 0.5);
    const sched::Schedule h2 = sched::generate("zb-h2", row.p, row.m, 1, cost);
    const sched::Schedule v = sched::generate("zb-v", row.p, row.m, 2, cost);
    const double bh = paper_bubble(h2, cost), bv = paper_bubble(v, cost);
    std::printf("| %s | %d | %d | %.4f | %.4f | %+.4f | %.4f | %.4f | %+.4f | %.2f | %.2f |\n", c.model, row.p, row.m,
                bh, bv, bv - bh, row.h2, row.v, row.v - row.h2, peak(v, 0.5), peak(h2, 0.5));
  }
  std::printf("\nT_F = T_B = T_W = 1, no transfer time (the paper: zero bubble at p M_B):\n\n");
  for (int p : {4, 8, 16, 32}) {
    const sched::CostModel cost = sched::uniform_cost(1, 1, 1, 0.0, 0.5);
    const sched::Schedule v = sched::generate("zb-v", p, 3 * p, 2, cost);
    std::printf("  p=%d m=%d: bubble %.4f, peak %.2f M_B\n", p, 3 * p, paper_bubble(v, cost), peak(v, 0.5));
  }
}

void zb_table() {
  std::printf(
      "## ZB-1p / ZB-2p vs the Zero Bubble paper (arXiv 2401.10241 Table 5; costs Table 9; bubble rate on the "
      "longest stage span)\n\n"
      "| model | p | m | 1F1B | ZB-H1 | ZB-H2 | ZB-1p ours | ZB-1p paper | ZB-2p ours | ZB-2p paper | ZB-2p ours, "
      "makespan objective |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  int worse = 0;
  for (const auto& c : test_support::zb_paper_configs()) {
    const sched::CostModel cost = sched::uniform_cost(c.f, c.b, c.w, c.comm, 0.5);
    auto rate = [&](const std::string& kind, sched::ZbObjective objective = sched::ZbObjective::StageSpan) {
      return paper_bubble(sched::generate(kind, c.p, c.m, 1, cost, 0.0, objective), cost);
    };
    const double one = rate("zb-1p"), two = rate("zb-2p");
    const double two_sync = rate("zb-2p", sched::ZbObjective::Makespan);
    worse += (one > c.zb1p + 5e-5) + (two > c.zb2p + 5e-5);
    std::printf("| %s | %d | %d | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f | %.4f |\n", c.model, c.p, c.m,
                rate("1f1b"), rate("zb-h1"), rate("zb-h2"), one, c.zb1p, two, c.zb2p, two_sync);
  }
  std::printf("\n%d of %zu figures above the paper's\n", worse, 2 * test_support::zb_paper_configs().size());
  zbv_table();
}

}  // namespace

static constexpr const char* kUsage =
    "usage: bench_sim [--quick | --speed | --split DECK... | --grid [INPUTS_DIR] | --heavy [INPUTS_DIR] | --wide |\n"
    "                  --scale P M [STEPS] | --migration [DECK...] [KEY=VALUE...] | --zb-table |\n"
    "                  --migration-run DECK jitter|straggler [KEY=VALUE...] | --schedules [DECK...]]\n"
    "  (no option: the speed rows and the schedule x noise table; --quick skips p=1024; --speed runs only the\n"
    "  speed rows; INPUTS_DIR defaults to ./inputs, run from the repository root; what each part measures: the\n"
    "  comment at the top of bench/bench_sim.cpp)\n";

static int run(int argc, char** argv) {
  // An option it does not know, or one without its arguments, ran the whole default benchmark (minutes).
  if (argc > 1) {
    const std::string option = argv[1];
    static const std::vector<std::string> known = {"--quick",    "--speed",         "--split",    "--grid",
                                                   "--heavy",    "--wide",          "--scale",    "--migration",
                                                   "--zb-table", "--migration-run", "--schedules"};
    const bool missing = (option == "--scale" && argc < 4) || (option == "--migration-run" && argc < 4);
    if (std::find(known.begin(), known.end(), option) == known.end() || missing) {
      const std::string why = missing ? "'" + option + "' needs its arguments" : "unknown option '" + option + "'";
      std::fprintf(stderr, "bench_sim: %s\n%s", why.c_str(), kUsage);
      return 2;
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "--zb-table") == 0) {
    zb_table();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--schedules") == 0) {
    std::vector<std::string> decks(argv + 2, argv + argc);
    if (decks.empty()) decks = {"inputs/gpt3-1.5b.yaml", "inputs/gpt3-6.2b.yaml", "inputs/gpt3-14.6b.yaml"};
    bench::check_readable(decks);
    schedules_table(decks);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--migration") == 0) {
    std::vector<std::string> decks, extra;  // KEY=VALUE arguments go to every migration row
    for (int i = 2; i < argc; ++i) (std::strchr(argv[i], '=') ? extra : decks).push_back(argv[i]);
    if (decks.empty()) {
      decks = {"inputs/gpt3-1.5b.yaml", "inputs/gpt3-6.2b.yaml", "inputs/gpt3-14.6b.yaml", "inputs/multimodal.yaml"};
    }
    bench::check_readable(decks);
    migration_table(decks, extra);
    return 0;
  }
  if (argc > 3 && std::strcmp(argv[1], "--migration-run") == 0) {
    // One row of the ablation's simulation alone (no global tier), for a profiler or an instruction counter:
    // valgrind --tool=callgrind --toggle-collect='conductor::sim::simulate_run(*' (docs/migration.md).
    const std::string path = argv[2], preset = argv[3];
    bench::check_readable({path});
    const auto noise = std::find_if(mig_noises().begin(), mig_noises().end(),
                                    [&](const MigNoise& n) { return std::string(n.name).rfind(preset, 0) == 0; });
    if (noise == mig_noises().end()) {
      std::fprintf(stderr, "bench_sim --migration-run: noise '%s' is not one of: jitter, straggler\n", preset.c_str());
      return 2;
    }
    const MigRow row = mig_run(path, read_text(path), std::vector<std::string>(argv + 4, argv + argc), *noise, false);
    std::printf("makespan %.3f ms, %.1f MB/step, CPU %.4f s\n", row.makespan, row.bytes / 1e6, row.cpu_s);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--split") == 0) {
    std::vector<std::string> decks(argv + 2, argv + argc);
    if (decks.empty()) {
      decks = {"inputs/gpt3-1.5b.yaml", "inputs/gpt3-6.2b.yaml", "inputs/gpt3-14.6b.yaml", "inputs/multimodal.yaml"};
    }
    bench::check_readable(decks);
    split_table(decks);
    return 0;
  }
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  const bool speed_only = argc > 1 && std::strcmp(argv[1], "--speed") == 0;
  if (argc > 1 && std::strcmp(argv[1], "--heavy") == 0) {
    heavy(argc > 2 ? argv[2] : "inputs");
    return 0;
  }
  if (argc > 3 && std::strcmp(argv[1], "--scale") == 0) {
    const int p = bench::int_argument("--scale P", argv[2], 2, 65536);
    const int m = bench::int_argument("--scale M", argv[3], p, 1 << 20);
    if (argc > 5) throw bench::BadArgument("--scale takes P M [STEPS], got " + std::to_string(argc - 2) + " values");
    const int steps = argc > 4 ? bench::int_argument("--scale STEPS", argv[4], 1, 100000) : (p >= 1024 ? 1 : 5);
    at_scale_header();
    at_scale(p, m, steps);
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--wide") == 0) {
    wide();
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--grid") == 0) {
    const std::string inputs = argc > 2 ? argv[2] : "inputs";
    grid(inputs);
    heavy(inputs);
    at_scale_header();
    at_scale(64, 512, 5);
    at_scale(1024, 4096, 1);
    return 0;
  }
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

int main(int argc, char** argv) { return conductor::bench::guarded_main("bench_sim", run, argc, argv, kUsage); }
