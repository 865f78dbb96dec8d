#pragma once
// The global tier's PPO planner (scheduler.kind: ppo): a sched::OrderPlanner whose orders come from a trained
// policy (LibTorch). Only the `conductor` command wires it in (cli/global_tier.hpp); the runtime and the
// simulator's control loop drive it through sched::PlanAhead like any other planner.
#include <memory>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::policy {

// The ppo planner. It keeps an online cost estimate: per rank and op kind, an EMA (weight scheduler.ema) of
// the step's mean measured F/B/W times (a BW is split in the estimate's B:W ratio), of the transfer time (SEND
// events) and of the relative spread of op times around their means (the noise level). Each order is the
// realized per-rank order of a greedy rollout of the policy on the generated schedule under the estimate.
// With scheduler.verify_samples = k > 0 it is run, as the runtime will run it (schedule.execution / hint),
// on k noise draws of the estimate next to the generator's order, and the generator's order is kept when it
// does better on them (the policy proposes, the simulator checks; cheap at these sizes).
struct PpoStats {
  double last_latency_ms = 0;     // wall time of the last initial_order / next_order
  double estimated_level = 0;     // estimated relative noise level
  bool used_policy_order = true;  // the last order came from the policy (false: the generator's won the check)
  sched::CostModel estimate;      // the online cost estimate (per rank, ms per microbatch of the whole rank)
};
const PpoStats* ppo_stats(const sched::OrderPlanner& planner);  // nullptr unless a ppo planner

// Loads scheduler.policy (InputError naming the file when it is missing, corrupt or of another feature
// version).
std::unique_ptr<sched::OrderPlanner> make_ppo_planner(const plan::Plan& plan, const sched::Schedule& generated);

struct Policy;
// A ppo planner with a policy already in memory (train-policy's summary, tests, benchmarks).
std::unique_ptr<sched::OrderPlanner> make_ppo_planner(const plan::Plan& plan, const sched::Schedule& generated,
                                                      const Policy& policy);

}  // namespace conductor::policy
