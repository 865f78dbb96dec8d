// The global tier's figures: (1) the ppo scheduler's latency per step (initial_order/next_order: online cost
// update, greedy policy rollout, verification draws) for p=8, m=32 on one core; (2) the ablation table of the
// Conductor paper in the simulator: ZB-2p strict, ZB-2p readiness (bf, bfw hints), ppo strict and readiness, at
// p=8 with 10% jitter (m=24 and m=64), a straggler and a congestion case.
//   build/bench/bench_policy [POLICY_FILE] [STEPS] [DECK]
// (defaults: inputs/policies/default.pt, 50 steps, inputs/gpt3-1.5b.yaml; run from the repository root)
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/policy/compare.hpp"
#include "conductor/policy/policy.hpp"
#include "conductor/policy/ppo_planner.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/control_loop.hpp"
#include "conductor/sim/noise.hpp"

using namespace conductor;

namespace {

std::string g_deck_text;  // the base deck (inputs/gpt3-1.5b.yaml: the seed papers' p=8, m=24 setup)

config::Deck make_deck(const std::vector<std::string>& overrides) {
  config::LoadOptions lo;
  lo.source_name = "bench_policy";
  lo.command = config::Command::Simulate;
  lo.overrides = {"schedule.kind=zb-2p", "trace.enabled=false", "scheduler.kind=ppo"};
  for (const auto& o : overrides) lo.overrides.push_back(o);
  return config::parse_deck(g_deck_text, lo);
}

void latency(const policy::Policy& pol, int verify) {
  const config::Deck deck = make_deck({"parallel.microbatches=32", "noise.kind=gaussian", "noise.level=0.1",
                                       "scheduler.verify_samples=" + std::to_string(verify)});
  const sched::Schedule gen = sched::make_schedule(config::resolve(deck));
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), gen);
  sim::SimOptions opt = sim::SimOptions::from_plan(config::resolve(deck), gen);
  opt.record_events = false;
  auto planner = policy::make_ppo_planner(config::resolve(deck), gen, pol);
  const auto run = sim::simulate_with_planner(noise, opt, 60, *planner);
  std::vector<double> lat(run.latency_ms.begin() + 1, run.latency_ms.end());  // next_order calls only
  std::sort(lat.begin(), lat.end());
  double mean = 0;
  for (double x : lat) mean += x / static_cast<double>(lat.size());
  std::printf(
      "latency p=8 m=32 verify_samples=%d: next_order mean %.3f ms, median %.3f ms, p90 %.3f ms (%zu calls, 1 "
      "thread)\n",
      verify, mean, lat[lat.size() / 2], lat[lat.size() * 9 / 10], lat.size());
}

}  // namespace

static int run(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string path = argc > 1 ? argv[1] : policy::resolve_policy_path("");
  if (argc > 4) throw bench::BadArgument("three arguments at most, got " + std::to_string(argc - 1));
  const int steps = argc > 2 ? bench::int_argument("STEPS", argv[2], 1, 100000) : 50;
  const std::string deck_path = argc > 3 ? argv[3] : "inputs/gpt3-1.5b.yaml";
  {
    std::ifstream f(deck_path);
    if (!f) {
      std::fprintf(stderr, "bench_policy: cannot read %s (run from the repository root)\n", deck_path.c_str());
      return 2;
    }
    std::stringstream ss;
    ss << f.rdbuf();
    g_deck_text = ss.str();
  }
  const policy::Policy pol = policy::load_policy(path);
  std::printf("policy %s, deck %s, %d simulated steps per method\n\n", path.c_str(), deck_path.c_str(), steps);
  latency(pol, 0);
  latency(pol, 2);  // the default scheduler.verify_samples
  latency(pol, 4);

  struct Case {
    std::string title;
    std::vector<std::string> overrides;
  };
  const std::vector<Case> cases = {
      {"10% jitter, p=8, m=24",
       {"parallel.microbatches=24", "noise.kind=gaussian", "noise.level=0.1", "noise.seed=10"}},
      {"10% jitter, p=8, m=64",
       {"parallel.microbatches=64", "noise.kind=gaussian", "noise.level=0.1", "noise.seed=10"}},
      {"straggler (rank 3 x1.5 from step 0) + 5% jitter, p=8, m=24",
       {"parallel.microbatches=24", "noise.kind=[gaussian, straggler]", "noise.level=0.05", "noise.seed=20",
        "noise.straggler_rank=3", "noise.straggler_factor=1.5"}},
      {"congestion (prob 0.2, bursts of 4, +10% of a mean F per transfer) + 10% jitter, p=8, m=24",
       {"parallel.microbatches=24", "noise.kind=[gaussian, congestion]", "noise.level=0.1", "noise.seed=30"}},
  };
  for (const auto& c : cases) {
    const config::Deck deck = make_deck(c.overrides);
    const auto rows = policy::compare_methods(config::resolve(deck), pol, steps);
    std::printf("\n== %s ==\n%s", c.title.c_str(), policy::format_table(rows).c_str());
  }
  return 0;
}

int main(int argc, char** argv) {
  return conductor::bench::guarded_main(
      "bench_policy", run, argc, argv,
      "usage: bench_policy [POLICY.pt (default: the shipped policy) [STEPS (1 .. 100000, default 50) [DECK (default "
      "inputs/gpt3-1.5b.yaml)]]]\n");
}
