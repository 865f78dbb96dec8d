#include "conductor/sim/control_loop.hpp"

#include <chrono>
#include <utility>

namespace conductor::sim {

PlannedRun simulate_with_planner(const NoiseModel& noise, const SimOptions& options, int steps,
                                 sched::OrderPlanner& planner,
                                 const std::function<void(StepResult&, const sched::Schedule&)>& on_step) {
  PlannedRun out;
  SimOptions internal = options;
  internal.record_events = true;
  internal.comm_events = true;
  const auto t0 = std::chrono::steady_clock::now();
  sched::Schedule order = planner.initial_order();
  out.latency_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  sched::PlanAhead ahead(planner, steps, sched::PlanAhead::Threading::Inline);
  out.run.samples_per_step = options.samples_per_step;
  StepClock clock;
  for (int k = 0; k < steps; ++k) {
    StepResult r = clock.simulate(order, noise, internal, k);
    std::optional<sched::Schedule> next = ahead.after_step(k, order, r.events);
    if (!options.record_events) {
      r.events.clear();
    } else if (!options.comm_events) {
      std::erase_if(r.events, [](const trace::OpEvent& e) {
        return e.kind == trace::EventKind::SEND || e.kind == trace::EventKind::RECV;
      });
    }
    if (on_step) on_step(r, order);
    r.events.clear();
    r.events.shrink_to_fit();
    out.run.steps.push_back(std::move(r));
    if (options.stop && options.stop()) break;
    if (next) order = std::move(*next);
  }
  out.latency_ms.insert(out.latency_ms.end(), ahead.latency_ms().begin(), ahead.latency_ms().end());
  finish_run(out.run, order.p);
  return out;
}

}  // namespace conductor::sim
