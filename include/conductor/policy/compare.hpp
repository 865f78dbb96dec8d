#pragma once
// The global tier against its baselines on one deck, in the simulator (the Conductor paper's ablation rows):
// the deck's generated schedule run strict, and readiness with bf and bfw hints (scheduler static), and the ppo
// scheduler's orders run strict and readiness (bf, bfw, and schedule: its order as the ranking). Same noise model and
// steps for every method.
#include <string>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/policy/policy.hpp"

namespace conductor::policy {

struct MethodResult {
  std::string name;         // "zb-2p strict", "zb-2p readiness bfw", "ppo strict", ...
  double makespan_ms = 0;   // mean completion time of a step
  double bubble_ratio = 0;  // mean
  double throughput = 0;    // samples / s
  double improvement = 0;   // throughput / the first method's - 1
  double latency_ms = 0;    // mean scheduler time per step (0 for static)
  double policy_share = 0;  // ppo: fraction of steps run with the policy's order (rest: the generator's)
};

std::vector<MethodResult> compare_methods(const plan::Plan& plan, const Policy& policy, int steps);

// A fixed-width table of the results (one line per method) and the same as CSV.
std::string format_table(const std::vector<MethodResult>& results);
std::string to_csv(const std::vector<MethodResult>& results);

}  // namespace conductor::policy
