#pragma once
// The global tier: after each step, the scheduler sees what the step measured and returns the hint order of
// the next step. Rank 0 of the runtime calls it between steps and broadcasts the order; `conductor simulate`
// calls it the same way between simulated steps, so the simulator models the whole control loop.
#include <memory>
#include <vector>

#include "conductor/config/deck.hpp"
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
  // The order of step obs.step + 1. Must keep p, m, v and the placement; the runtime validates it.
  virtual sched::Schedule next_order(const StepObservation& obs) = 0;
};

// scheduler.kind: static keeps the generator's order every step.
std::unique_ptr<GlobalScheduler> make_global_scheduler(const config::Deck& deck, const sched::Schedule& generated);

}  // namespace conductor::policy
