#pragma once
// The whole global-tier control loop in the simulator: step k runs the scheduler's current order
// (sim::simulate_step, so the same engine, arbiter and noise model as `conductor simulate`), the scheduler sees
// the step's events and returns step k+2's order, as rank 0's planner thread does at run time (it plans while
// step k+1 trains).
#include <functional>
#include <vector>

#include "conductor/policy/global_scheduler.hpp"
#include "conductor/sim/simulator.hpp"

namespace conductor::policy {

struct ScheduledRun {
  sim::RunResult run;              // as sim::simulate_run returns it
  std::vector<double> latency_ms;  // wall time of initial_order() and of each next_order(), in call order
};

// `noise` is built for the generated schedule (same p, v, placement as every order). Events are recorded
// internally (the scheduler needs them); `on_step` sees each step's result with the events options asked for,
// and the order that step ran.
ScheduledRun simulate_with_scheduler(
    const sim::NoiseModel& noise, const sim::SimOptions& options, int steps, GlobalScheduler& scheduler,
    const std::function<void(const sim::StepResult&, const sched::Schedule&)>& on_step = {});

}  // namespace conductor::policy
