#pragma once
// The discrete-event simulator: the schedule, executed in virtual time by the shared engine and arbiter
// (sched/engine.hpp, sched/arbiter.hpp) with op times from the noise model, one step after another. Each step
// yields its figures and, on request, its trace events (trace::OpEvent, ns on a clock where step k starts
// where step k-1 ended) for the HDF5 trace.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::sim {

struct SimOptions {
  sched::Execution execution = sched::Execution::Strict;
  sched::Hint hint = sched::Hint::Schedule;
  double wide_spread = sched::kWideSpread;  // backfill ranks as critical from this noise spread on (driver.hpp)
  double memory_limit = 0;                  // M_F per rank, <= 0 unlimited
  std::vector<double> rank_memory_limit;    // per rank, overrides memory_limit when not empty
  bool record_events = false;               // fill StepResult::events
  bool comm_events = false;                 // also SEND/RECV events
  double samples_per_step = 1.0;            // m x microbatch_size, for throughput
  std::int64_t activation_bytes = 0;        // one microbatch's activation: SEND/RECV and compute rows' bytes
  plan::Migration migration;                // computation migration (sched/migration.hpp); off by default
  // Fill StepResult::order_bound_ms (sim/order_bound.hpp; one more pass over the step's draws): `conductor
  // simulate` asks for it; not with migration, which moves work and so is not bound by it.
  bool order_bound = false;
  // Overlapping steps (schedule.post_validation): each rank starts step k+1 as soon as it has finished its own
  // part of step k, instead of when the whole step has ended (StepClock; docs/post-validation.md).
  bool overlap_steps = false;
  // Asked after each step (its callback done): true ends the run there, with the steps so far (a stop signal to
  // `conductor simulate`). Empty: every step runs.
  std::function<bool()> stop;
  // The plan's options for `schedule` (its per-rank memory limits: sched::rank_memory_limits).
  static SimOptions from_plan(const plan::Plan& plan, const sched::Schedule& schedule);
};

// Migration's bytes over one link in a step: from the owner's side (`from`) to the helper's or replica holder's.
struct LinkBytes {
  int from = 0, to = 0;
  double bytes = 0;
};
// `links` summed per (from, to), each link's bytes added in the order given: one entry per link, sorted. A sorted
// vector, not a map: a step's links cost one allocation, not one per link. With p (every rank below it) and p x
// p small beside the entries, summed in a p x p table; else sorted (no table of p x p for a wide pipeline).
std::vector<LinkBytes> sum_links(std::vector<LinkBytes> links, int p = 0);
// The bytes on link (from, to) of sum_links()'s result (0: none).
double bytes_on(const std::vector<LinkBytes>& links, int from, int to);

// Figures of one step; definitions as trace/summary.hpp (makespan = last compute end - first compute start).
struct StepResult {
  int step = 0;
  double start_ms = 0;  // on the run's clock
  double makespan_ms = 0;
  double bubble_ratio = 0;                            // 1 - sum busy / (p x makespan)
  double stage_bubble_ratio = 0;                      // mean over ranks of 1 - busy / the rank's span
  double max_stage_bubble_ratio = 0;                  // largest over ranks: the Zero Bubble paper's bubble rate
  double lower_bound_ms = 0;                          // max per-rank busy
  double order_bound_ms = 0;                          // SimOptions::order_bound: no order of these draws is faster
  double throughput = 0;                              // samples / s
  std::vector<double> busy_ms, idle_ms, peak_memory;  // per rank (memory in M_F)
  std::size_t num_ops = 0;
  std::vector<trace::OpEvent> events;  // when SimOptions::record_events
  // Computation migration: ops migrated, bytes moved in all, and per link (owner, helper) of the step;
  // refresh_bytes: of migration_bytes, the replicas' refresh (migration.weights: replicas).
  int migrated_ops = 0;
  double migration_bytes = 0, refresh_bytes = 0;
  std::vector<LinkBytes> link_bytes;  // the links that carried any, by (from, to)
  std::vector<double> rank_end_ms;    // per rank, the end of its last op of the step on the run's clock
};

// Simulates step `step` starting at `start_ms` on the run's clock.
StepResult simulate_step(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int step,
                         double start_ms = 0.0);

// Where each step starts on the run's clock. Synchronous steps (the default): every rank starts step k where
// step k-1 ended (its last op on any rank). Overlapping steps (SimOptions::overlap_steps): rank r starts step k
// when it has finished its own ops of step k-1 (its optimizer step costs no time in the model, and the global
// check is post-validated), so step k's forwards overlap step k-1's tail on the other ranks.
class StepClock {
 public:
  StepResult simulate(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int step);

 private:
  double clock_ = 0.0;           // synchronous: the end of the previous step
  std::vector<double> release_;  // overlapping: per rank, the end of its previous step
  // Per rank, where its rows of the previous step end in the trace (ns): a step's rows never start before them
  // (its times and origin are rounded on their own, which could put a row a nanosecond before the last).
  std::vector<std::int64_t> rows_end_ns_;
};

struct RunResult {
  std::vector<StepResult> steps;  // events dropped unless kept by the caller's callback
  // Over the whole run (finish_run), beside the per-step means: from the first op of step 0 to the last op of
  // the last step (span_ms), the samples of all steps per second of it and the bubble of the run on the global
  // measure (1 - busy / (p x span_ms)); and the steady state, which leaves step 0's fill out: from the end of
  // step 0 to the end of the last step, the samples of steps 1.. per second and their bubble. With one step the
  // steady figures are the run's.
  double samples_per_step = 0;
  double span_ms = 0, run_throughput = 0, run_bubble_ratio = 0;
  double steady_throughput = 0, steady_bubble_ratio = 0;
  double mean_max_stage_bubble_ratio = 0;  // per step, the largest rank's 1 - busy / span (the paper's measure)
  // The steps' means; mean_throughput is their samples over their summed makespans (samples per step / the mean
  // makespan), not the mean of their rates.
  double mean_makespan_ms = 0, mean_bubble_ratio = 0, mean_lower_bound_ms = 0, mean_throughput = 0;
  double mean_stage_bubble_ratio = 0;
  int stopped_by_signal = 0;       // a stop signal ended the run before its last step (conductor simulate): its number
  double mean_order_bound_ms = 0;  // of the steps' order bounds (0 without SimOptions::order_bound)
  std::vector<double> mean_busy_ms, mean_idle_ms, peak_memory;  // per rank (peak over steps)
  double mean_migrated_ops = 0, mean_migration_bytes = 0;       // per step
  double mean_refresh_bytes = 0;                                // per step, of mean_migration_bytes
  std::vector<LinkBytes> mean_link_bytes;                       // per step, by (owner, helper)
};

// Runs `steps` steps; `on_step` (optional) sees each step's result (with events when recorded) before its
// events are dropped from the returned RunResult.
template <class OnStep>
RunResult simulate_run(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int steps,
                       OnStep&& on_step);
RunResult simulate_run(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int steps);

// Fills the run means from steps.
void finish_run(RunResult& run, int p);

template <class OnStep>
RunResult simulate_run(const sched::Schedule& schedule, const NoiseModel& noise, const SimOptions& options, int steps,
                       OnStep&& on_step) {
  RunResult run;
  run.samples_per_step = options.samples_per_step;
  StepClock clock;
  for (int k = 0; k < steps; ++k) {
    StepResult r = clock.simulate(schedule, noise, options, k);
    on_step(r);
    r.events.clear();
    r.events.shrink_to_fit();
    run.steps.push_back(std::move(r));
    if (options.stop && options.stop()) break;
  }
  finish_run(run, schedule.p);
  return run;
}

}  // namespace conductor::sim
