#pragma once
// The global tier's control loop in the simulator (`conductor simulate` with a planner): step k runs the planner's
// current order (simulate_step, so the same engine, arbiter and noise model as `conductor simulate`), and
// sched::PlanAhead, the loop rank 0 runs at run time, hands the planner the step's events and returns the
// order planned from step k-1 for step k+1. Planning is inline here (same calls in the same order as at run
// time, on the caller's thread).
#include <functional>
#include <vector>

#include "conductor/sched/planner.hpp"
#include "conductor/sim/simulator.hpp"

namespace conductor::sim {

struct PlannedRun {
  RunResult run;                   // as simulate_run returns it
  std::vector<double> latency_ms;  // wall time of initial_order() and of each next_order(), in call order
};

// `noise` is built for the generated schedule (same p, v, placement as every order). Events are recorded
// internally (the planner needs them); `on_step` sees each step's result with the events options asked for,
// and the order that step ran, and may restate its figures (`conductor simulate` takes the trace's, in whole
// nanoseconds) before the run keeps it.
PlannedRun simulate_with_planner(const NoiseModel& noise, const SimOptions& options, int steps,
                                 sched::OrderPlanner& planner,
                                 const std::function<void(StepResult&, const sched::Schedule&)>& on_step = {});

}  // namespace conductor::sim
