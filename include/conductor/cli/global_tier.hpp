#pragma once
// The global tier's wiring: the planner `conductor run` and `conductor simulate` use for the deck's
// scheduler.kind. The PPO planner lives in the policy layer (LibTorch), which a build configured with
// -DCONDUCTOR_POLICY=OFF leaves out; only this file knows whether it is there.
#include <string>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/planner.hpp"

namespace conductor::cli {

// Empty for scheduler.kind static (the generator's order, no replanning); the PPO planner's factory for ppo.
// Without the policy layer, ppo prints no_global_tier() once (rank 0) and throws CollectiveExit(2) on every
// rank.
sched::PlannerFactory planner_factory(const plan::Plan& plan);

// The message of a build without the policy layer when `what` ("scheduler.kind: ppo", "conductor
// train-policy") needs it: what is missing and how to build it in.
std::string no_global_tier(const std::string& what);

}  // namespace conductor::cli
