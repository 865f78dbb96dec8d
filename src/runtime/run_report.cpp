#include "conductor/runtime/run_report.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "conductor/runtime/clock.hpp"
#include "conductor/sim/summary_json.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/version.hpp"

namespace conductor::runtime {

namespace {

std::string loss_text(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error(path.string() + ": cannot write");
}

trace::RunInfo run_info(const plan::Plan& plan, const sched::Schedule& order, int world_size,
                        const std::vector<std::string>& hosts) {
  trace::RunInfo info;
  info.deck = plan.deck_yaml;
  info.world_size = world_size;
  info.schedule = plan.schedule.kind;
  info.execution = plan.schedule.execution;
  info.hint = plan.schedule.hint;
  info.backend = plan.backend;
  info.source = "runtime";
  info.hostnames = hosts;
  info.git_revision = kGitRevision;
  info.pipeline = order.p;
  info.microbatches = order.m;
  info.virtual_chunks = order.v;
  // Called on rank 0, whose steady clock is the common clock (offset 0): its UNIX epoch, read back to back.
  info.clock = "runtime: rank 0's std::chrono::steady_clock in ns, every rank's readings shifted onto it at start-up";
  const std::int64_t unix_now =
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  info.epoch_unix_ns = unix_now - steady_now_ns();
  return info;
}

// The simulator's per-step record, from measured events, so the summary has the simulator's fields.
sim::StepResult step_result(const trace::StepRecord& rec, const std::vector<trace::OpEvent>& events, int p,
                            const std::vector<double>& peaks) {
  sim::StepResult r;
  r.step = rec.step;
  r.start_ms = static_cast<double>(rec.start_ns) * 1e-6;
  r.makespan_ms = static_cast<double>(rec.makespan_ns) * 1e-6;
  r.bubble_ratio = rec.bubble_ratio;
  r.stage_bubble_ratio = rec.stage_bubble_ratio;
  r.lower_bound_ms = rec.lower_bound_ns * 1e-6;
  r.throughput = rec.samples_per_s;
  r.busy_ms.assign(static_cast<std::size_t>(p), 0.0);
  for (const auto& e : events) r.busy_ms[static_cast<std::size_t>(e.rank)] += (e.end_ns - e.start_ns) * 1e-6;
  r.idle_ms.resize(static_cast<std::size_t>(p));
  for (int k = 0; k < p; ++k)
    r.idle_ms[static_cast<std::size_t>(k)] = r.makespan_ms - r.busy_ms[static_cast<std::size_t>(k)];
  r.peak_memory = peaks;
  r.num_ops = events.size();
  return r;
}

}  // namespace

RunReport::RunReport(const plan::Plan& plan, const sched::Schedule& order, int world_size, int first_step,
                     const std::vector<std::string>& hosts, bool has_math)
    : plan_(plan),
      dir_(plan.run.output),
      world_size_(world_size),
      first_step_(first_step),
      has_math_(has_math),
      samples_per_step_(static_cast<double>(plan.pipeline.m) * plan.pipeline.microbatch_size) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw InputError("run.output = '" + dir_.string() + "': cannot create the folder: " + ec.message());
  write_file(dir_ / "resolved.yaml", plan.deck_yaml);
  if (!plan.trace.enabled) return;
  const std::string trace_path = (dir_ / "trace.h5").string();
  if (first_step > 0 && std::filesystem::exists(trace_path)) {
    // A resumed run (e.g. a requeued Slurm job) continues its trace: docs/trace.md, "Resumed runs".
    writer_ = std::make_unique<trace::TraceWriter>(trace_path, first_step);
    log::info("continuing the trace " + trace_path + " at step " + std::to_string(first_step + 1));
  } else {
    writer_ = std::make_unique<trace::TraceWriter>(trace_path, run_info(plan, order, world_size, hosts));
  }
}

void RunReport::record_step(int step, const std::vector<trace::OpEvent>& all, const std::vector<double>& peaks,
                            double loss, double valid_loss) {
  std::vector<trace::OpEvent> compute_events;
  for (const auto& e : all) {
    if (trace::is_compute(e.kind)) compute_events.push_back(e);
  }
  trace::StepRecord rec = trace::summarize_step(compute_events, world_size_, step, samples_per_step_);
  rec.loss = loss;
  if (writer_) {
    writer_->append_events(all);
    writer_->append_step(rec);
    writer_->flush();
  }
  measured_.steps.push_back(step_result(rec, compute_events, world_size_, peaks));
  losses_.push_back(loss);
  if (!std::isnan(valid_loss)) valid_losses_.emplace_back(step, valid_loss);
  char line[320];
  std::snprintf(line, sizeof line, "step %4d/%d  loss %s  time %8.2f ms  bubble %.3f  samples/s %9.1f", step + 1,
                plan_.run.steps, !has_math_ ? "  -   " : loss_text(loss).c_str(),
                static_cast<double>(rec.makespan_ns) * 1e-6, rec.bubble_ratio, rec.samples_per_s);
  log::info(std::isnan(valid_loss) ? std::string(line) : std::string(line) + "  val loss " + loss_text(valid_loss));
}

void RunReport::finish(const sched::Schedule& order, double memory_limit, int steps_done,
                       const PlannerFigures& planner) {
  if (writer_) writer_->close();
  sim::finish_run(measured_, world_size_);
  const double final_loss = losses_.empty() ? std::numeric_limits<double>::quiet_NaN() : losses_.back();
  const sim::TrainingFigures training{first_step_, losses_, planner.orders_from_policy, planner.latency_ms,
                                      valid_losses_};
  write_file(dir_ / "summary.json",
             sim::dump_json(sim::summary_json(measured_, plan_, order, memory_limit, training)) + "\n");
  if (!planner.latency_ms.empty()) {
    double latency_sum = 0;
    for (double l : planner.latency_ms) latency_sum += l;
    char line[160];
    std::snprintf(line, sizeof line,
                  "global tier: %d steps ran its orders, planning latency mean %.3f ms (overlapped with training)",
                  planner.orders_from_policy, latency_sum / static_cast<double>(planner.latency_ms.size()));
    log::info(line);
  }
  const bool has_loss = std::isfinite(final_loss);
  char line[256];
  std::snprintf(
      line, sizeof line,
      "summary: %d steps, mean step %.2f ms, bubble ratio %.3f, %.1f samples/s, makespan/lower bound %.3f%s%s",
      steps_done, measured_.mean_makespan_ms, measured_.mean_bubble_ratio, measured_.mean_throughput,
      measured_.mean_lower_bound_ms > 0 ? measured_.mean_makespan_ms / measured_.mean_lower_bound_ms : 0.0,
      has_loss ? ", final loss " : "", has_loss ? loss_text(final_loss).c_str() : "");
  log::info(line);
  log::info("results: " + (dir_ / "summary.json").string() + ", " +
            (writer_ ? (dir_ / "trace.h5").string() + ", " : std::string()) + (dir_ / "resolved.yaml").string());
}

}  // namespace conductor::runtime
