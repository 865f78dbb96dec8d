#pragma once
// The global tier: after each step, the scheduler sees what the step measured and returns a hint order. Rank 0
// of the runtime calls it on a planner thread while the next step trains (the order planned from step k runs
// at step k+2, so planning never stalls the pipeline) and broadcasts it; `conductor simulate` models the same
// loop with the same one-step lag (policy::simulate_with_scheduler).
#include <memory>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::policy {

// What one step measured: every compute op of every rank (trace events, ns on the common clock), and the
// order the step was run with.
struct StepObservation {
  int step = 0;
  const sched::Schedule* order = nullptr;
  const std::vector<trace::OpEvent>* events = nullptr;
};

class GlobalScheduler {
 public:
  virtual ~GlobalScheduler() = default;
  virtual const char* name() const = 0;
  // The order of step 0.
  virtual sched::Schedule initial_order() = 0;
  // The order of a later step (obs.step + 2 in the control loop). Must keep p, m, v and the placement; the runtime
  // validates it.
  virtual sched::Schedule next_order(const StepObservation& obs) = 0;
};

// scheduler.kind: static keeps the generator's order every step; ppo loads scheduler.policy (InputError naming
// the file when it is missing, corrupt or of another feature version) and replans every step (below).
std::unique_ptr<GlobalScheduler> make_global_scheduler(const config::Deck& deck, const sched::Schedule& generated);

// The ppo scheduler. It keeps an online cost estimate: per rank and op kind, an EMA (weight scheduler.ema) of
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
const PpoStats* ppo_stats(const GlobalScheduler& scheduler);  // nullptr unless a ppo scheduler

struct Policy;
// A ppo scheduler with a policy already in memory (train-policy's summary, tests, benchmarks).
std::unique_ptr<GlobalScheduler> make_ppo_scheduler(const config::Deck& deck, const sched::Schedule& generated,
                                                    const Policy& policy);

}  // namespace conductor::policy
