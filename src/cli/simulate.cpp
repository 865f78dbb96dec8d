// `conductor simulate DECK [overrides] [--json]`: the deck's schedule, cost model and noise in virtual time.
// Writes <run.output>/resolved.yaml, summary.json and, with trace.enabled, trace.h5 (the runtime's schema);
// run.output defaults to runs/<run.name>-sim, apart from the measured run's runs/<run.name>.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/stop_signal.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/control_loop.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/sim/summary_json.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/folder_lock.hpp"
#include "conductor/util/progress.hpp"
#include "conductor/util/text_file.hpp"
#include "conductor/version.hpp"

namespace conductor::cli {

namespace {

// Up to this many ops per step the figures come from the recorded events through trace::summarize_step (the
// definition the runtime uses); above it, without a trace, the simulator's own figures (same definition,
// tested equal) spare the memory of the events.
constexpr std::size_t kSummarizeFromEventsUpTo = 4'000'000;

void print_human(const sim::RunResult& run, const config::Deck& d, const sched::Schedule& s, double limit,
                 const std::filesystem::path& out) {
  std::printf("schedule %s, execution %s, hint %s: p = %d, m = %d, v = %d, memory limit %.4g M_F\n",
              d.schedule.kind.c_str(), d.schedule.execution.c_str(), d.schedule.hint.c_str(), s.p, s.m, s.v, limit);
  std::string kinds;
  for (const auto& k : d.noise.kind) kinds += (kinds.empty() ? "" : ",") + k;
  std::printf("noise %s (level %.4g, seed %llu), %zu step%s\n\n", kinds.c_str(), d.noise.level, d.noise.seed,
              run.steps.size(), run.steps.size() == 1 ? "" : "s");
  std::printf("  makespan        %12.4f ms (mean over steps)\n", run.mean_makespan_ms);
  std::printf("  lower bound     %12.4f ms (largest per-rank work)\n", run.mean_lower_bound_ms);
  std::printf("  makespan / LB   %12.4f\n",
              run.mean_lower_bound_ms > 0 ? run.mean_makespan_ms / run.mean_lower_bound_ms : 0.0);
  if (run.mean_order_bound_ms > 0) {
    std::printf("  order bound     %12.4f ms (no order of these draws is faster: fill, work and drain per rank)\n",
                run.mean_order_bound_ms);
  }
  std::printf("  bubble ratio    %12.4f (1 - busy / (p x makespan))\n", run.mean_bubble_ratio);
  std::printf("  stage bubble    %12.4f (per-stage, Zero Bubble paper: mean of 1 - busy / rank span)\n",
              run.mean_stage_bubble_ratio);
  std::printf("  throughput      %12.2f samples/s\n", run.mean_throughput);
  std::printf(
      "  run             %12.4f ms for %zu steps%s: %.2f samples/s, bubble %.4f; steady state (from "
      "the end of step 0): %.2f samples/s, bubble %.4f; largest rank's stage bubble %.4f (the Zero "
      "Bubble paper's rate, mean over steps)\n",
      run.span_ms, run.steps.size(), d.schedule.post_validation ? " (overlapping)" : "", run.run_throughput,
      run.run_bubble_ratio, run.steady_throughput, run.steady_bubble_ratio, run.mean_max_stage_bubble_ratio);
  if (d.migration.enabled) {
    std::printf("  migration       %12.1f ops/step, %.4g MB/step over %s (per link in summary.json)\n",
                run.mean_migrated_ops, run.mean_migration_bytes / 1e6, d.migration.link.c_str());
  }
  std::printf("\n");
  const int shown = std::min(s.p, 16);
  std::printf("  rank    busy ms    idle ms  peak M_F\n");
  for (int r = 0; r < shown; ++r) {
    std::printf("  %4d %10.3f %10.3f %9.3f\n", r, run.mean_busy_ms[r], run.mean_idle_ms[r], run.peak_memory[r]);
  }
  if (shown < s.p) std::printf("  ... %d more ranks in summary.json\n", s.p - shown);
  const std::size_t steps_shown = std::min<std::size_t>(run.steps.size(), 10);
  std::printf("\n  step  makespan ms  bubble  stage bubble\n");
  for (std::size_t k = 0; k < steps_shown; ++k) {
    std::printf("  %4d %12.4f %7.4f %13.4f\n", run.steps[k].step, run.steps[k].makespan_ms, run.steps[k].bubble_ratio,
                run.steps[k].stage_bubble_ratio);
  }
  if (steps_shown < run.steps.size())
    std::printf("  ... %zu more steps in summary.json\n", run.steps.size() - steps_shown);
  std::printf("\nwrote %s\n", out.string().c_str());
}

// The simulator's trace: the same schema and run attributes as the runtime's, its source "simulator".
std::unique_ptr<trace::TraceWriter> open_trace(const config::Deck& deck, const sched::Schedule& schedule,
                                               const std::string& resolved, const std::filesystem::path& path) {
  trace::RunInfo info;
  info.deck = resolved;
  info.world_size = schedule.p;
  info.schedule = deck.schedule.kind;
  info.execution = deck.schedule.execution;
  info.hint = deck.schedule.hint;
  info.backend = "simulator";
  info.source = "simulator";
  info.hostnames.assign(schedule.p, "simulator");
  info.git_revision = kGitRevision;
  info.pipeline = schedule.p;
  info.microbatches = schedule.m;
  info.virtual_chunks = schedule.v;
  return std::make_unique<trace::TraceWriter>(path.string(), info);
}

// The shared definition of the per-step figures (trace/summary.hpp) from the step's events, and the step's own
// figures restated as the trace's, so summary.json, the trace's /steps and analysis/ agree.
trace::StepRecord adopt_trace_figures(sim::StepResult& r, int p, const sim::SimOptions& options) {
  const trace::StepRecord rec = trace::summarize_step(r.events, p, r.step, options.samples_per_step);
  // The step's span is the trace's, in its whole nanoseconds, with or without migration (so a run where
  // nothing moves reports the same makespan either way). With migration the events hold each op from its
  // start on the owner to its end (the helper's part included: the owner's wait for it counts as busy in the
  // trace, as in the runtime's) and the helpers' HELP rows: the simulator's own bubbles and bound, which
  // count each rank's compute only, stay in summary.json.
  r.makespan_ms = static_cast<double>(rec.makespan_ns) * trace::kTickMs;
  r.throughput = rec.samples_per_s;
  // The compute-only bound never exceeds the step (no rank computes two things at once); against the
  // rounded makespan it may by under a nanosecond, which would read as a step faster than its bound.
  if (options.migration.enabled) {
    r.lower_bound_ms = std::min(r.lower_bound_ms, r.makespan_ms);
  } else {
    r.bubble_ratio = rec.bubble_ratio;
    r.stage_bubble_ratio = rec.stage_bubble_ratio;
    r.lower_bound_ms = rec.lower_bound_ns * trace::kTickMs;
  }
  return rec;
}

// Step `step`'s rows into the trace and onto disk; a write that fails (a full disk) names the step, as a run's
// record does (docs/trace.md), the steps before it whole in the file.
void write_step(trace::TraceWriter& writer, const sim::StepResult& r, const trace::StepRecord& rec) {
  writer.append_events(r.events);
  writer.append_step(rec);
  try {
    writer.flush();
  } catch (const Error& e) {
    throw Error("step " + std::to_string(r.step + 1) + ": " + e.what());
  }
}

// A run of the deck's schedule (no global tier): each step's figures from its events (trace/summary.hpp) when it
// has them, and its events into the trace.
sim::RunResult simulate_listed(const sched::Schedule& schedule, const sim::NoiseModel& noise,
                               const sim::SimOptions& options, int steps, Progress& progress,
                               trace::TraceWriter* writer) {
  return sim::simulate_run(schedule, noise, options, steps, [&](sim::StepResult& r) {
    progress.update(r.step + 1);
    if (r.events.empty()) return;
    const trace::StepRecord rec = adopt_trace_figures(r, schedule.p, options);
    if (writer) write_step(*writer, r, rec);
  });
}

// The whole control loop of the global tier, as rank 0 runs it: after each simulated step the scheduler sees that
// step's timings and produces the next step's order. Its mean latency per order goes to stderr.
sim::RunResult simulate_planned(const sim::NoiseModel& noise, const sim::SimOptions& options, int steps,
                                sched::OrderPlanner& planner, int p, Progress& progress, trace::TraceWriter* writer) {
  const sim::PlannedRun scheduled =
      sim::simulate_with_planner(noise, options, steps, planner, [&](sim::StepResult& r, const sched::Schedule&) {
        progress.update(r.step + 1);
        if (r.events.empty()) return;
        const trace::StepRecord rec = adopt_trace_figures(r, p, options);
        if (writer) write_step(*writer, r, rec);
      });
  double total_latency = 0.0;
  for (double l : scheduled.latency_ms) total_latency += l;
  if (!scheduled.latency_ms.empty()) {
    std::fprintf(stderr, "global scheduler %s: mean latency %.3f ms per order\n", planner.name(),
                 total_latency / static_cast<double>(scheduled.latency_ms.size()));
  }
  return scheduled.run;
}

}  // namespace

int cmd_simulate(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Simulate);
  const plan::Plan plan = config::resolve(deck);
  const std::filesystem::path out_dir(deck.run.output);
  sched::Schedule schedule;
  sim::SimOptions options;
  std::unique_ptr<sim::NoiseModel> noise;
  const sched::PlannerFactory make_planner = planner_factory(plan);
  std::unique_ptr<sched::OrderPlanner> planner;
  // Every check before anything is allocated or written: the size guard first (the schedule alone can outgrow
  // the machine), then the run folder and the trace's room in it, then the inputs the schedule and the planner read.
  try {
    check_simulate_size(deck, kSummarizeFromEventsUpTo);
    // The folder first: one that cannot be written (/proc, a read-only mount) is named as such, not as one with
    // no free space for the trace.
    check_run_output(deck, config::Command::Simulate);
    check_trace_space(deck);
    schedule = sched::make_schedule(plan);
    options = sim::SimOptions::from_plan(plan, schedule);
    options.order_bound = true;  // how far any order of the same draws could still go (not with migration)
    noise = std::make_unique<sim::NoiseModel>(sim::NoiseModel::from_plan(plan, schedule));
    if (make_planner) planner = make_planner(schedule);
  } catch (const InputError& e) {
    std::fprintf(stderr, "conductor: %s\n", e.what());
    return kExitUsage;
  }

  // SIGTERM/SIGINT (Slurm's time limit, scancel, Ctrl-C) end the run after the step in progress: its trace, and
  // a summary.json of the steps done, are written as for a whole run, and the exit status says it stopped.
  options.stop = &runtime::stop_requested;  // the handlers are installed from the start (cli.cpp)
  if (runtime::stop_requested()) {
    std::fprintf(stderr, "conductor: simulate stopped by signal %d before it started; nothing written\n",
                 runtime::stop_signal_number());
    return kExitStopped;
  }
  std::error_code ec;
  const bool folder_existed = std::filesystem::exists(out_dir, ec);
  create_run_folder(out_dir);
  // Beside earlier results until all three are complete (summary.json last: it marks a folder of results).
  ResultFiles files(out_dir, {"resolved.yaml", "trace.h5", "summary.json"});
  const std::string resolved = config::resolved_yaml(deck);
  write_text_file(files.path("resolved.yaml"), resolved);

  std::unique_ptr<trace::TraceWriter> writer =
      deck.trace.enabled ? open_trace(deck, schedule, resolved, files.path("trace.h5")) : nullptr;
  options.record_events = deck.trace.enabled || schedule.num_actions() <= kSummarizeFromEventsUpTo;
  options.comm_events = deck.trace.enabled && deck.trace.comm_events;

  Progress progress("simulate", "steps", deck.run.steps);  // on stderr, at most once a second
  sim::RunResult run;
  try {
    run = planner ? simulate_planned(*noise, options, deck.run.steps, *planner, schedule.p, progress, writer.get())
                  : simulate_listed(schedule, *noise, options, deck.run.steps, progress, writer.get());
  } catch (const InputError& e) {
    // The deck is refused mid-run (the noise drew a clock past the trace's): what this run wrote goes, so the
    // folder does not hold a resolved.yaml and a partial trace that a rerun with the mended deck would be refused
    // over as another run's results. Earlier results stay.
    writer.reset();
    files.discard();
    if (!folder_existed) {  // the folder this run made goes too (its lock file is its last content)
      std::filesystem::remove(out_dir / kFolderLockName, ec);
      std::filesystem::remove(out_dir, ec);
    }
    throw InputError(std::string(e.what()) + "; nothing of this run is kept in " + out_dir.string());
  }
  if (writer) writer->close();
  sim::finish_run(run, schedule.p);

  const double limit = options.memory_limit;
  const bool stopped = runtime::stop_requested() && static_cast<int>(run.steps.size()) < deck.run.steps;
  if (stopped) run.stopped_by_signal = runtime::stop_signal_number();  // num_steps: the steps done
  const std::string json =
      sim::dump_json(sim::summary_json(run, plan, schedule, limit, planner ? planner->policy_source() : nullptr));
  if (stopped && files.earlier()) {
    // A stopped rerun: the earlier complete results stay; what this run wrote beside them goes.
    files.discard();
    std::fprintf(stderr,
                 "conductor: simulate stopped by signal %d after %zu of run.steps = %d steps; the earlier results in "
                 "%s are kept as they were\n",
                 runtime::stop_signal_number(), run.steps.size(), deck.run.steps, out_dir.string().c_str());
    return kExitStopped;
  }
  write_text_file(files.path("summary.json"), json + "\n");
  files.commit();
  if (inv.has_flag("--json")) {
    std::printf("%s\n", json.c_str());
  } else {
    print_human(run, deck, schedule, limit, out_dir);
  }
  if (stopped) {
    std::fprintf(stderr,
                 "conductor: simulate stopped by signal %d after %zu of run.steps = %d steps; %s holds them "
                 "(summary.json%s)\n",
                 runtime::stop_signal_number(), run.steps.size(), deck.run.steps, out_dir.string().c_str(),
                 writer ? ", trace.h5" : "");
    return kExitStopped;
  }
  return 0;
}

}  // namespace conductor::cli
