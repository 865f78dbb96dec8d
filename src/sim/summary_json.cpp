#include "conductor/sim/summary_json.hpp"

namespace conductor::sim {

namespace {

Json step_json(const StepResult& s, bool order_bound) {
  Json j = {{"step", s.step},
            {"makespan_ms", s.makespan_ms},
            {"bubble_ratio", s.bubble_ratio},
            {"stage_bubble_ratio", s.stage_bubble_ratio},
            {"lower_bound_ms", s.lower_bound_ms},
            {"throughput", s.throughput}};
  if (order_bound) j["order_bound_ms"] = s.order_bound_ms;
  return j;
}

// Only with migration.enabled, so a run without it writes the summary it always did.
Json migration_json(const RunResult& run, const plan::Migration& m) {
  Json links = Json::array();
  for (const LinkBytes& l : run.mean_link_bytes) {
    links.push_back({{"owner", l.from}, {"helper", l.to}, {"bytes_per_step", l.bytes}});
  }
  Json per_step = Json::array();
  for (const StepResult& s : run.steps)
    per_step.push_back({{"migrated_ops", s.migrated_ops}, {"bytes", s.migration_bytes}});
  Json out = {{"link", m.link},
              {"bandwidth_gbps", m.bandwidth_gbps},
              {"latency_ms", m.latency_ms},
              {"slices", m.slices},
              {"max_fraction", m.max_fraction},
              {"migrated_ops_per_step", run.mean_migrated_ops},
              {"bytes_per_step", run.mean_migration_bytes},
              {"links", std::move(links)},
              {"steps", std::move(per_step)}};
  // Replicas: their refresh is part of bytes_per_step (and of its link's), also shown alone.
  if (m.replicas) out["refresh_bytes_per_step"] = run.mean_refresh_bytes;
  return out;
}

}  // namespace

Json summary_json(const RunResult& run, const plan::Plan& plan, const sched::Schedule& schedule, double memory_limit,
                  const sched::PolicySource* policy) {
  Json out;
  out["makespan_ms"] = run.mean_makespan_ms;
  out["bubble_ratio"] = run.mean_bubble_ratio;
  out["stage_bubble_ratio"] = run.mean_stage_bubble_ratio;
  out["lower_bound_ms"] = run.mean_lower_bound_ms;
  out["makespan_over_lower_bound"] = run.mean_lower_bound_ms > 0 ? run.mean_makespan_ms / run.mean_lower_bound_ms : 0.0;
  // The order bound (sim/order_bound.hpp) only where the simulator computed it: conductor simulate without
  // migration. The runtime's summary has no draws to compute it from.
  const bool order_bound = run.mean_order_bound_ms > 0;
  if (order_bound) {
    out["order_bound_ms"] = run.mean_order_bound_ms;
    // Every step's makespan is at least its bound; the two means are sums along different paths, so a run at its
    // bound read 0.999999999999999. Within rounding of 1 it is 1; further below is left for the tests to catch.
    const double ratio = run.mean_makespan_ms / run.mean_order_bound_ms;
    out["makespan_over_order_bound"] = ratio < 1 && ratio > 1 - 1e-12 ? 1.0 : ratio;
  }
  out["throughput"] = run.mean_throughput;
  out["schedule"] = plan.schedule.kind;
  out["execution"] = plan.schedule.execution;
  out["hint"] = plan.schedule.hint;
  out["pipeline"] = schedule.p;
  out["microbatches"] = schedule.m;
  out["virtual"] = schedule.v;
  out["memory_limit"] = memory_limit;
  out["noise"] = {{"kind", plan.noise.kind}, {"level", plan.noise.level}, {"seed", plan.noise.seed}};
  // Which policy planned the orders: only where one did (scheduler.kind ppo).
  if (policy && plan.scheduler.kind == "ppo") {
    out["policy"] = {{"path", policy->path},
                     {"bytes", policy->bytes},
                     {"crc32", policy->crc32},
                     {"deck_crc32", policy->deck_crc32.empty() ? Json() : Json(policy->deck_crc32)}};
  }
  out["num_steps"] = run.steps.size();
  out["busy_ms"] = run.mean_busy_ms;
  out["idle_ms"] = run.mean_idle_ms;
  out["peak_memory"] = run.peak_memory;
  Json steps = Json::array();
  for (const StepResult& s : run.steps) steps.push_back(step_json(s, order_bound));
  out["steps"] = std::move(steps);
  // The run as a whole (simulator.hpp, RunResult): what a user gets when steps overlap.
  out["run"] = {{"overlapping_steps", plan.schedule.post_validation},
                {"span_ms", run.span_ms},
                {"throughput", run.run_throughput},
                {"bubble_ratio", run.run_bubble_ratio},
                {"steady_throughput", run.steady_throughput},
                {"steady_bubble_ratio", run.steady_bubble_ratio},
                {"max_stage_bubble_ratio", run.mean_max_stage_bubble_ratio}};
  if (plan.migration.enabled) out["migration"] = migration_json(run, plan.migration);
  if (run.stopped_by_signal != 0) out["stopped_by_signal"] = run.stopped_by_signal;
  return out;
}

Json summary_json(const RunResult& run, const plan::Plan& plan, const sched::Schedule& schedule, double memory_limit,
                  const TrainingFigures& training) {
  Json out = summary_json(run, plan, schedule, memory_limit, training.policy);
  out["scheduler"] = {{"kind", plan.scheduler.kind},
                      {"orders_from_policy", training.orders_from_policy},
                      {"latency_ms", training.scheduler_latency_ms}};
  out["backend"] = plan.backend;
  out["first_step"] = training.first_step;
  out["losses"] = training.losses;
  out["final_loss"] = training.losses.empty() ? Json() : Json(training.losses.back());
  Json valid = Json::array();
  for (const auto& [step, loss] : training.valid_losses) valid.push_back({{"step", step + 1}, {"loss", loss}});
  out["valid_losses"] = std::move(valid);
  out["final_valid_loss"] = training.valid_losses.empty() ? Json() : Json(training.valid_losses.back().second);
  return out;
}

std::string dump_json(const Json& json) { return json.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace conductor::sim
