#include "conductor/policy/compare.hpp"

#include <algorithm>
#include <cstdio>

#include "conductor/policy/ppo_planner.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/control_loop.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"

namespace conductor::policy {

std::vector<MethodResult> compare_methods(const plan::Plan& plan, const Policy& policy, int steps) {
  const sched::Schedule generated = sched::make_schedule(plan);
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(plan, generated);
  struct Row {
    std::string label, execution, hint;
    bool ppo;
  };
  const std::string base = plan.schedule.kind;
  const std::vector<Row> rows = {
      {base + " strict", "strict", "schedule", false},
      {base + " readiness bf", "readiness", "bf", false},
      {base + " readiness bfw", "readiness", "bfw", false},
      {"ppo strict", "strict", "schedule", true},
      {"ppo readiness bf", "readiness", "bf", true},
      {"ppo readiness bfw", "readiness", "bfw", true},
      {"ppo readiness schedule", "readiness", "schedule", true},  // the policy's order as the ranking itself
  };
  std::vector<MethodResult> out;
  for (const Row& row : rows) {
    plan::Plan d = plan;
    d.schedule.execution = row.execution;
    d.schedule.hint = row.hint;
    d.scheduler.kind = row.ppo ? "ppo" : "static";
    sim::SimOptions opt = sim::SimOptions::from_plan(d, generated);
    opt.record_events = false;
    std::unique_ptr<sched::OrderPlanner> planner =
        row.ppo ? make_ppo_planner(d, generated, policy) : std::make_unique<sched::StaticPlanner>(generated);
    int policy_steps = 0;
    const sim::PlannedRun run =
        sim::simulate_with_planner(noise, opt, steps, *planner, [&](const sim::StepResult&, const sched::Schedule& s) {
          if (s.name.rfind("ppo:", 0) == 0) ++policy_steps;
        });
    MethodResult m;
    m.name = row.label;
    m.makespan_ms = run.run.mean_makespan_ms;
    m.bubble_ratio = run.run.mean_bubble_ratio;
    m.throughput = run.run.mean_throughput;
    if (d.schedule.post_validation && !run.run.steps.empty()) {
      // Overlapping steps: a step's own makespan and bubble understate what the run delivers
      // (docs/post-validation.md); the run's span is what the methods are ranked on, as the policy trained on it.
      m.makespan_ms = run.run.span_ms / static_cast<double>(run.run.steps.size());
      m.bubble_ratio = run.run.run_bubble_ratio;
      m.throughput = run.run.run_throughput;
    }
    if (row.ppo) {
      double sum = 0;
      for (double x : run.latency_ms) sum += x;
      m.latency_ms = run.latency_ms.empty() ? 0 : sum / static_cast<double>(run.latency_ms.size());
      m.policy_share = static_cast<double>(policy_steps) / steps;
    }
    out.push_back(m);
  }
  for (auto& m : out) m.improvement = out[0].throughput > 0 ? m.throughput / out[0].throughput - 1.0 : 0.0;
  return out;
}

std::string format_table(const std::vector<MethodResult>& results) {
  // The method column as wide as its longest name (a schedule kind such as 1f1b-interleaved made 24 too narrow).
  int width = 24;
  for (const auto& m : results) width = std::max(width, static_cast<int>(m.name.size()));
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-*s %14s %12s %10s %11s %12s\n", width, "method", "completion_ms", "throughput+",
                "bubble", "latency_ms", "policy_share");
  s += buf;
  for (const auto& m : results) {
    std::snprintf(buf, sizeof buf, "%-*s %14.4f %11.2f%% %9.2f%% %11.3f %12.2f\n", width, m.name.c_str(), m.makespan_ms,
                  100.0 * m.improvement, 100.0 * m.bubble_ratio, m.latency_ms, m.policy_share);
    s += buf;
  }
  return s;
}

std::string to_csv(const std::vector<MethodResult>& results) {
  std::string s = "method,completion_ms,throughput_improvement,bubble_ratio,throughput,latency_ms,policy_share\n";
  char buf[256];
  for (const auto& m : results) {
    std::snprintf(buf, sizeof buf, "%s,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f\n", m.name.c_str(), m.makespan_ms, m.improvement,
                  m.bubble_ratio, m.throughput, m.latency_ms, m.policy_share);
    s += buf;
  }
  return s;
}

}  // namespace conductor::policy
