#pragma once
// PPO training of the scheduling policy in the simulator environment (env.hpp).
//
// Episode: one step of `base` (its lists give the memory reservations and the hint order) under a random draw:
// a gaussian noise level from [lo, hi], per-rank F/B/W cost factors exp(spread * z), and per-op noise from a
// counter-based hash of (episode seed, rank, chunk, microbatch, kind). The policy samples among the feasible ops
// at every decision point. Reward of a decision: minus the idle rank-time (ranks not computing) from it to the
// next decision, in units of one rank's work per step, so an episode's return is minus its bubble
// (p x makespan - work; the work is fixed by the draw, so this is the makespan objective with denser credit).
// Update: GAE(gamma, lambda) on a critic of the global features, normalised advantages, clipped surrogate,
// entropy bonus, value loss, `epochs` passes in shuffled minibatches, global gradient-norm clipping, Adam.
// Deterministic per seed: torch::manual_seed, our own RNG and one torch thread.
#include <functional>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/config/policy_config.hpp"
#include "conductor/policy/env.hpp"
#include "conductor/policy/policy.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::policy {

struct TrainSetup {
  sched::Schedule base;
  sched::CostModel cost;     // nominal costs (episodes perturb them)
  EnvOptions env;            // memory limit, a, heuristic
  config::PolicyConfig ppo;  // hyper-parameters (the ppo.* keys)
};

// The deck's setup: the schedule, costs and memory limit of config::resolve(deck), and ppo.heuristic. The
// policy layer keeps the deck here for train-policy's ppo.* keys (the plan carries only what runs need).
TrainSetup setup_from_deck(const config::Deck& deck);

struct IterationStats {
  int iteration = 0;
  int decisions = 0;
  double sampled_makespan = 0;    // mean over the iteration's episodes (ms)
  double heuristic_makespan = 0;  // the heuristic on the same draws
  double greedy_makespan = 0;     // argmax policy on the same draws
  double policy_loss = 0, value_loss = 0, entropy = 0;
  double seconds = 0;  // wall time so far
};

struct TrainResult {
  Policy policy;
  std::vector<IterationStats> curve;  // the iterations done
  bool stopped = false;               // `stop` said so before ppo.iterations were done (policy: as it was then)
};

// `stop`, when given, is asked between episodes: true ends the training early (TrainResult::stopped), with the
// iterations done so far in the curve.
TrainResult train_ppo(const TrainSetup& setup, const std::function<void(const IterationStats&)>& on_iteration = {},
                      const std::function<bool()>& stop = {});

// One episode's op durations: cost x per-rank factors x per-op gaussian noise of `level` (hash of seed).
struct EpisodeDraw {
  unsigned long long seed = 0;
  double level = 0;
  sched::CostModel cost;  // the perturbed per-rank costs
};
sched::ComputeTimeFn draw_compute(const EpisodeDraw& draw, int v);
sched::CommTimeFn draw_comm(const EpisodeDraw& draw);

// Greedy rollout of `policy` on `base` (times from compute/comm, features from `predicted`); returns the makespan
// and, when `order` is given, the realized schedule.
double greedy_makespan(const Policy& policy, const sched::Schedule& base, const EnvOptions& env,
                       const sched::CostModel& predicted, const sched::ComputeTimeFn& compute,
                       const sched::CommTimeFn& comm, sched::Schedule* order = nullptr);

}  // namespace conductor::policy
