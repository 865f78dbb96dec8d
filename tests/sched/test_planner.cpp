// sched::PlanAhead, the global tier's control loop that `conductor run` (Background: a planner thread) and
// `conductor simulate` (Inline) share: the order planned from step k runs at step k+2, the planner sees the
// order and events of the step it plans from, latencies and planned orders are counted, errors surface.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "conductor/sched/generators.hpp"
#include "conductor/sched/planner.hpp"

namespace conductor {
namespace {

using Threading = sched::PlanAhead::Threading;

sched::Schedule named(std::string name) {
  sched::Schedule s = sched::generate("1f1b", 2, 4, 1, sched::uniform_cost(1, 1, 1, 0, 0.5));
  s.name = std::move(name);
  return s;
}

// Names each order after the step it was planned from and records what it was shown.
struct Recorder final : sched::OrderPlanner {
  std::vector<int> observed_steps;
  std::vector<std::string> observed_orders;
  std::vector<std::size_t> observed_events;
  std::vector<std::thread::id> threads;
  int throw_at = -1;  // next_order for this step throws
  const char* name() const override { return "recorder"; }
  sched::Schedule initial_order() override { return named("initial"); }
  sched::Schedule next_order(const sched::StepObservation& obs) override {
    observed_steps.push_back(obs.step);
    observed_orders.push_back(obs.order->name);
    observed_events.push_back(obs.events->size());
    threads.push_back(std::this_thread::get_id());
    if (obs.step == throw_at) throw std::runtime_error("planner failed at " + std::to_string(obs.step));
    return named("from-" + std::to_string(obs.step));
  }
};

// Step k "measures" k + 1 events, so the planner's view of the events names the step they came from.
std::vector<trace::OpEvent> events_of(int step) { return std::vector<trace::OpEvent>(step + 1); }

// Runs `steps` steps as the runtime and the simulator do; returns the order each step ran.
std::vector<std::string> run_loop(Recorder& planner, int steps, Threading threading) {
  sched::Schedule order = planner.initial_order();
  sched::PlanAhead ahead(planner, steps, threading);
  std::vector<std::string> ran;
  for (int k = 0; k < steps; ++k) {
    ran.push_back(order.name);
    if (auto next = ahead.after_step(k, order, events_of(k))) order = std::move(*next);
  }
  EXPECT_EQ(ahead.latency_ms().size(), static_cast<std::size_t>(std::max(0, steps - 2)));
  EXPECT_EQ(ahead.orders_from_planner(), std::max(0, steps - 2));
  return ran;
}

TEST(PlanAhead, OrderPlannedFromStepKRunsAtStepKPlus2) {
  for (Threading threading : {Threading::Inline, Threading::Background}) {
    Recorder planner;
    const std::vector<std::string> ran = run_loop(planner, 6, threading);
    EXPECT_EQ(ran, (std::vector<std::string>{"initial", "initial", "from-0", "from-1", "from-2", "from-3"}));
    // Every plan is made from the step it names, with that step's order and events; none after step 3 (its
    // order would run at step 6, after the last).
    EXPECT_EQ(planner.observed_steps, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(planner.observed_orders, (std::vector<std::string>{"initial", "initial", "from-0", "from-1"}));
    EXPECT_EQ(planner.observed_events, (std::vector<std::size_t>{1, 2, 3, 4}));
  }
}

TEST(PlanAhead, ShortRunsNeverPlan) {
  for (int steps : {1, 2}) {
    Recorder planner;
    EXPECT_EQ(run_loop(planner, steps, Threading::Background), std::vector<std::string>(steps, "initial"));
    EXPECT_TRUE(planner.observed_steps.empty());
  }
}

TEST(PlanAhead, BackgroundPlansOnItsOwnThreadInlineOnTheCaller) {
  for (Threading threading : {Threading::Inline, Threading::Background}) {
    Recorder planner;
    run_loop(planner, 5, threading);
    ASSERT_EQ(planner.threads.size(), 3u);
    for (const auto& id : planner.threads) EXPECT_EQ(id == std::this_thread::get_id(), threading == Threading::Inline);
  }
}

// The point of the planner thread: after_step returns while the plan is still being computed (the next step
// trains meanwhile), and the plan sees the events as they were, not the caller's later changes.
TEST(PlanAhead, BackgroundReturnsBeforeThePlanIsDone) {
  struct Gated final : sched::OrderPlanner {
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::size_t seen_events = 0;
    const char* name() const override { return "gated"; }
    sched::Schedule initial_order() override { return named("initial"); }
    sched::Schedule next_order(const sched::StepObservation& obs) override {
      // Bounded, so a loop that waited for the plan inside after_step fails instead of hanging.
      if (gate.wait_for(std::chrono::seconds(10)) != std::future_status::ready)
        throw std::runtime_error("never released");
      if (obs.step == 0) seen_events = obs.events->size();
      return named("planned");
    }
  } planner;
  sched::PlanAhead ahead(planner, 4, Threading::Background);
  std::vector<trace::OpEvent> events = events_of(2);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(ahead.after_step(0, named("initial"), events).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  events.clear();  // the caller's events change while the plan runs
  planner.release.set_value();
  const auto next = ahead.after_step(1, named("initial"), events_of(1));
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->name, "planned");
  // after_step(1) started planning from step 1 on another thread: wait for it before reading what step 0's
  // plan saw (reading at once raced with that thread; ThreadSanitizer found it, and it failed once under load).
  ahead.finish();
  EXPECT_EQ(planner.seen_events, 3u);
}

// A plan that takes longer than a step holds the caller in after_step: the wait is measured (the run warns
// when it is large); Inline planning is the caller's own time, never a wait.
TEST(PlanAhead, WaitsForALatePlanAreCounted) {
  struct Slow final : sched::OrderPlanner {
    const char* name() const override { return "slow"; }
    sched::Schedule initial_order() override { return named("initial"); }
    sched::Schedule next_order(const sched::StepObservation&) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      return named("planned");
    }
  };
  for (Threading threading : {Threading::Inline, Threading::Background}) {
    Slow planner;
    sched::PlanAhead ahead(planner, 4, threading);
    ahead.after_step(0, named("initial"), events_of(0));
    ASSERT_TRUE(ahead.after_step(1, named("initial"), events_of(1)).has_value());  // at once: the plan is in flight
    ahead.finish();
    if (threading == Threading::Inline) {
      EXPECT_EQ(ahead.waited_ms(), 0.0);
    } else {
      EXPECT_GT(ahead.waited_ms(), 0.0);
    }
  }
}

// The run's warning (empty when planning costs the steps nothing): numbers as measured on 2 ranks sharing 2 cores
// (m = 1024, 64 verification draws: planning 442.8 ms, steps 439.4 ms); 1 ms of planning in 50 ms steps is fine.
TEST(PlanAhead, PlanningWarningSaysWhatItCosts) {
  EXPECT_EQ(sched::planning_warning(1.0, 50.0, 0.3, 10), "");
  const std::string busy = sched::planning_warning(442.8, 439.4, 0.3, 6);
  EXPECT_NE(busy.find("planning takes 442.8 ms per step, over half a step (439.4 ms): rank 0's planner thread needs "
                      "a core of its own"),
            std::string::npos)
      << busy;
  const std::string waited = sched::planning_warning(300.0, 100.0, 400.0, 10);
  EXPECT_NE(waited.find("rank 0 waited 400.0 ms for plans, 40.0% of the steps' time"), std::string::npos) << waited;
  EXPECT_EQ(sched::planning_warning(1.0, 0.0, 0.0, 0), "");  // no step ran
}

TEST(PlanAhead, PlannerErrorsSurface) {
  // Background: from the after_step that would have returned the order. Inline: at once.
  for (Threading threading : {Threading::Inline, Threading::Background}) {
    Recorder planner;
    planner.throw_at = 1;
    sched::PlanAhead ahead(planner, 6, threading);
    const sched::Schedule order = planner.initial_order();
    EXPECT_NO_THROW(ahead.after_step(0, order, events_of(0)));
    if (threading == Threading::Inline) {
      EXPECT_THROW(ahead.after_step(1, order, events_of(1)), std::runtime_error);
    } else {
      EXPECT_NO_THROW(ahead.after_step(1, order, events_of(1)));
      EXPECT_THROW(ahead.after_step(2, order, events_of(2)), std::runtime_error);
    }
  }
}

// A run stopped early: finish() waits for the plan in flight and counts its latency, not its order; a failed
// plan whose order would never run is no error.
TEST(PlanAhead, FinishWaitsForThePlanInFlight) {
  for (int throw_at : {-1, 1}) {
    Recorder planner;
    planner.throw_at = throw_at;
    sched::PlanAhead ahead(planner, 10, Threading::Background);
    const sched::Schedule order = planner.initial_order();
    ahead.after_step(0, order, events_of(0));
    ahead.after_step(1, order, events_of(1));
    ASSERT_NO_THROW(ahead.finish());
    EXPECT_EQ(planner.observed_steps, (std::vector<int>{0, 1}));
    EXPECT_EQ(ahead.latency_ms().size(), throw_at < 0 ? 2u : 1u);
    EXPECT_EQ(ahead.orders_from_planner(), 1);
  }
}

TEST(StaticPlanner, AlwaysTheGeneratorsOrder) {
  sched::StaticPlanner planner(named("generated"));
  EXPECT_EQ(planner.initial_order().name, "generated");
  const sched::Schedule other = named("other");
  sched::StepObservation obs;
  obs.order = &other;
  EXPECT_EQ(planner.next_order(obs).name, "generated");
}

}  // namespace
}  // namespace conductor
