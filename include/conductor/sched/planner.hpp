#pragma once
// The global tier's interface: after each step an OrderPlanner sees what the step measured and returns the
// order of a later step. The runtime (rank 0) and the simulator's control loop drive a planner through the
// same loop, PlanAhead: the order planned from step k's timings runs at step k+2, so planning overlaps step
// k+1 and never stalls the pipeline. Planners: StaticPlanner here (the generator's order every step) and the
// PPO planner of the policy layer (policy/ppo_planner.hpp, LibTorch), which only the `conductor` command
// wires in; runtime and sim know this interface alone.
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "conductor/sched/schedule.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::sched {

// What one step measured: every op of every rank (trace events, ns on the common clock), and the order the
// step ran.
struct StepObservation {
  int step = 0;
  const Schedule* order = nullptr;
  const std::vector<trace::OpEvent>* events = nullptr;
};

// The policy file a planner's orders come from, as a run records it (summary.json `policy`, docs/trace.md).
struct PolicySource {
  std::string path;         // the file opened: scheduler.policy, or the shipped default found (absolute)
  std::uint64_t bytes = 0;  // its size
  std::string crc32;        // CRC-32 of its bytes as read ("0x1a2b3c4d", util/checksum.hpp)
  std::string deck_crc32;   // its header's deck_crc32: the training deck's (policy/policy.hpp); "" when absent
};

class OrderPlanner {
 public:
  virtual ~OrderPlanner() = default;
  virtual const char* name() const = 0;
  // The policy file behind the orders; nullptr for a planner without one (static, a policy given in memory).
  virtual const PolicySource* policy_source() const { return nullptr; }
  // The order of step 0.
  virtual Schedule initial_order() = 0;
  // The order of a later step (obs.step + 2 in PlanAhead). Must keep p, m, v and the placement; the runtime
  // validates it.
  virtual Schedule next_order(const StepObservation& obs) = 0;
};

// scheduler.kind: static: the generator's order, every step.
class StaticPlanner final : public OrderPlanner {
 public:
  explicit StaticPlanner(Schedule generated) : order_(std::move(generated)) {}
  const char* name() const override { return "static"; }
  Schedule initial_order() override { return order_; }
  Schedule next_order(const StepObservation&) override { return order_; }

 private:
  Schedule order_;
};

// Builds the planner of a run from the generated schedule (rank 0 of the runtime calls it once). An empty
// factory means the static order without replanning.
using PlannerFactory = std::function<std::unique_ptr<OrderPlanner>(const Schedule& generated)>;

// What a run says when its planner costs the steps time (empty: nothing): rank 0 waited for plans over 1% of the
// steps' time (a plan takes longer than a step), or planning takes over half a step (the planner thread is busy
// most of each step: it needs a core of its own, or it slows the steps). Means in ms; `steps` steps ran.
std::string planning_warning(double mean_latency_ms, double mean_step_ms, double waited_ms, int steps);

// The control loop of the global tier, written once for `conductor run` and `conductor simulate`. After step
// k ran order O_k and measured its events, after_step(k, ...) returns the order of step k+1: the one planned
// from step k-1 (none for k = 0: steps 0 and 1 run the initial order), and starts planning step k+2's order
// from step k's events, unless that step would come after the last one. Background plans on a thread of its
// own (the runtime: rank 0 keeps training step k+1 meanwhile); Inline plans at once on the caller's thread
// (the simulator: same calls in the same order, deterministic). A planner error surfaces from the after_step
// that would have returned its order (Background) or from the one that planned it (Inline).
class PlanAhead {
 public:
  enum class Threading { Inline, Background };
  // `planner` must outlive this object; `steps` is the number of steps of the run (steps 0 .. steps-1).
  PlanAhead(OrderPlanner& planner, int steps, Threading threading);
  ~PlanAhead();
  PlanAhead(const PlanAhead&) = delete;
  PlanAhead& operator=(const PlanAhead&) = delete;

  std::optional<Schedule> after_step(int step, const Schedule& ran, std::vector<trace::OpEvent> events);
  // A run stopped early: waits for a plan still in flight so that latency_ms() is complete (its order never
  // runs, so its error, if any, does not matter).
  void finish();

  // Wall time of each next_order, in call order (ms).
  const std::vector<double>& latency_ms() const { return latency_ms_; }
  // Steps that ran an order the planner computed (after_step's answers).
  int orders_from_planner() const { return orders_from_planner_; }
  // Background: how long after_step waited for plans not done by the end of the step after the one they were
  // planned from (the caller's step stalls meanwhile: a plan that takes longer than a step), in ms, in all.
  double waited_ms() const { return waited_ms_; }

 private:
  struct Planned {
    Schedule order;
    double latency_ms = 0;
  };
  OrderPlanner& planner_;
  int steps_;
  Threading threading_;
  std::future<Planned> planning_;
  std::vector<double> latency_ms_;
  int orders_from_planner_ = 0;
  double waited_ms_ = 0;
};

}  // namespace conductor::sched
