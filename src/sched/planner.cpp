#include "conductor/sched/planner.hpp"

#include <chrono>
#include <cstdio>
#include <utility>

namespace conductor::sched {

PlanAhead::PlanAhead(OrderPlanner& planner, int steps, Threading threading)
    : planner_(planner), steps_(steps), threading_(threading) {}

// A future of std::async blocks in its destructor until the planner thread is done: the thread uses planner_.
PlanAhead::~PlanAhead() = default;

std::optional<Schedule> PlanAhead::after_step(int step, const Schedule& ran, std::vector<trace::OpEvent> events) {
  std::optional<Schedule> next;
  if (planning_.valid()) {
    const auto t0 = std::chrono::steady_clock::now();
    Planned planned = planning_.get();  // rethrows the planner's error
    if (threading_ == Threading::Background)
      waited_ms_ += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    latency_ms_.push_back(planned.latency_ms);
    next = std::move(planned.order);
    ++orders_from_planner_;
  }
  if (step + 2 >= steps_) return next;  // an order planned now would run after the last step
  // The observation owns copies: the caller's order and events change while the planner thread reads them.
  auto plan = [&planner = planner_, step, order = ran, events = std::move(events)] {
    StepObservation obs;
    obs.step = step;
    obs.order = &order;
    obs.events = &events;
    const auto t0 = std::chrono::steady_clock::now();
    Planned out{planner.next_order(obs), 0.0};
    out.latency_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return out;
  };
  if (threading_ == Threading::Background) {
    planning_ = std::async(std::launch::async, std::move(plan));
  } else {
    std::promise<Planned> done;  // an error propagates from here, at once
    done.set_value(plan());
    planning_ = done.get_future();
  }
  return next;
}

std::string planning_warning(double latency, double step, double waited, int steps) {
  char line[320];
  const double steps_ms = step * steps;
  if (steps_ms > 0 && waited > 0.01 * steps_ms) {
    std::snprintf(line, sizeof line,
                  "global tier: planning took longer than a step (mean %.1f ms against a mean step of %.1f ms), so "
                  "rank 0 waited %.1f ms for plans, %.1f%% of the steps' time; lower scheduler.verify_samples",
                  latency, step, waited, 100.0 * waited / steps_ms);
    return line;
  }
  if (step > 0 && latency > 0.5 * step) {
    std::snprintf(line, sizeof line,
                  "global tier: planning takes %.1f ms per step, over half a step (%.1f ms): rank 0's planner thread "
                  "needs a core of its own, or it slows the steps; lower scheduler.verify_samples",
                  latency, step);
    return line;
  }
  return "";
}

void PlanAhead::finish() {
  if (!planning_.valid()) return;
  try {
    latency_ms_.push_back(planning_.get().latency_ms);
  } catch (...) {
    // The order would have run after the stop: its planner's error has no step to report it for.
  }
}

}  // namespace conductor::sched
