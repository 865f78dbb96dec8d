#pragma once
// summary.json, the one place it is assembled: `conductor simulate` writes this object as it is, `conductor run`
// (rank 0) adds its training figures to it (runtime/training.cpp), so both share these fields by construction.
// The fields and their units: docs/trace.md, "summary.json".
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/simulator.hpp"

namespace conductor::sim {

// Keys stay in the order they are written (the order docs/trace.md lists them), not sorted.
using Json = nlohmann::ordered_json;

// The run's means (makespan_ms, bubble_ratio, stage_bubble_ratio, lower_bound_ms, makespan_over_lower_bound,
// throughput), the settings they came from (schedule, execution, hint, pipeline, microbatches, virtual,
// memory_limit, noise), num_steps, per-rank busy_ms, idle_ms and peak_memory, and steps: [{step, makespan_ms,
// bubble_ratio, stage_bubble_ratio, lower_bound_ms, throughput}]; with scheduler.kind ppo, policy: {path, bytes,
// crc32, deck_crc32} of the policy file that planned the orders (`policy`, the planner's policy_source(); deck_crc32
// null when the file does not say), absent for other kinds.
Json summary_json(const RunResult& run, const plan::Plan& plan, const sched::Schedule& schedule, double memory_limit,
                  const sched::PolicySource* policy = nullptr);

// What `conductor run` measures beyond the simulator's figures.
struct TrainingFigures {
  int first_step = 0;                                  // the step the run started from (> 0 after checkpoint.resume)
  std::vector<double> losses;                          // one per step run; NaN where no loss exists (emulated backend)
  int orders_from_policy = 0;                          // steps that ran an order the global tier computed
  std::vector<double> scheduler_latency_ms;            // wall time of each next_order
  std::vector<std::pair<int, double>> valid_losses{};  // (step, validation loss) per evaluation (eval.every)
  const sched::PolicySource* policy = nullptr;         // the global tier's policy file (scheduler.kind ppo)
};

// The simulator's summary above plus scheduler: {kind, orders_from_policy, latency_ms}, backend, first_step,
// losses and final_loss (the last loss; null when none), valid_losses ([{step, loss}], step counted from 1 as in
// the step lines; empty without eval.every) and final_valid_loss (null when none).
Json summary_json(const RunResult& run, const plan::Plan& plan, const sched::Schedule& schedule, double memory_limit,
                  const TrainingFigures& training);

// `json` as one line of text: non-finite numbers (a NaN loss) become null, so the file stays valid JSON; bytes
// that are not UTF-8 in strings become U+FFFD instead of failing the write.
std::string dump_json(const Json& json);

}  // namespace conductor::sim
