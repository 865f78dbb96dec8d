#include "conductor/runtime/run_report.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "conductor/plan/flops.hpp"
#include "conductor/runtime/clock.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sim/summary_json.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/folder_lock.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/progress.hpp"
#include "conductor/util/text_file.hpp"
#include "conductor/version.hpp"

namespace conductor::runtime {

namespace {

std::string loss_text(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
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
  std::vector<std::int64_t> first(static_cast<std::size_t>(p), INT64_MAX), last(static_cast<std::size_t>(p), INT64_MIN);
  // In one pass: each rank's busy time and span; the schedule's ops, as the simulator counts them (a helper's slice
  // work, HELP_*, is busy time, not an op); and computation migration as the simulator reports it: ops that gave
  // slices away (the owner's row) and the payload of every help both ways (its HELP_* row), per link (owner, helper).
  std::vector<sim::LinkBytes> links;
  for (const auto& e : events) {
    const std::size_t k = static_cast<std::size_t>(e.rank);
    r.busy_ms[k] += (e.end_ns - e.start_ns) * 1e-6;
    first[k] = std::min(first[k], e.start_ns);
    last[k] = std::max(last[k], e.end_ns);
    if (e.kind <= trace::EventKind::BW) {
      ++r.num_ops;
      r.migrated_ops += e.migrated > 0 ? 1 : 0;
    } else if (e.kind >= trace::EventKind::HELP_F && e.kind <= trace::EventKind::HELP_BW) {
      r.migration_bytes += static_cast<double>(e.bytes);
      links.push_back(sim::LinkBytes{e.peer, e.rank, static_cast<double>(e.bytes)});
    }
  }
  r.link_bytes = sim::sum_links(std::move(links));
  // The Zero Bubble paper's bubble rate: the largest rank's 1 - busy / its own span (as the simulator's).
  for (std::size_t k = 0; k < static_cast<std::size_t>(p); ++k) {
    const double span_ms = static_cast<double>(last[k] - first[k]) * 1e-6;
    if (last[k] > first[k]) r.max_stage_bubble_ratio = std::max(r.max_stage_bubble_ratio, 1.0 - r.busy_ms[k] / span_ms);
  }
  r.idle_ms.resize(static_cast<std::size_t>(p));
  for (int k = 0; k < p; ++k)
    r.idle_ms[static_cast<std::size_t>(k)] = r.makespan_ms - r.busy_ms[static_cast<std::size_t>(k)];
  r.peak_memory = peaks;
  return r;
}

// The step's figures as rank 0 derives them: what metrics.jsonl records and the step line prints.
struct Derived {
  double unix_s = 0, elapsed_s = 0, eta_s = -1;
  double step_ms = 0, tokens_per_s = 0, mfu = 0;
  double peak_memory_gb = 0, peak_activations = 0;
};

double max_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end()); }

// The step of a metrics.jsonl line; none for a line that is not a JSON object with an integer "step" (a torn
// last line).
std::optional<long long> row_step(const std::string& line) {
  const auto j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) return std::nullopt;
  return j["step"].get<long long>();
}

// NaN and infinities are not JSON: they become null.
// Rewrites a resumed run's metrics.jsonl with only the rows of steps before `first_step`, through a new file renamed
// over it (a crash leaves the old file whole). A killed attempt may have written rows past its last checkpoint; the
// resumed run writes those steps again. A line that is not a JSON object with an integer "step" (a torn last line)
// is dropped too.
void keep_metrics_before(const std::filesystem::path& path, int first_step) {
  std::ifstream in(path);
  if (!in) return;  // no metrics yet: the run starts the file
  std::string kept, line;
  bool dropped = false;
  while (std::getline(in, line)) {
    if (const std::optional<long long> step = row_step(line); step && *step < first_step) {
      kept += line + '\n';
    } else {
      dropped = true;
    }
  }
  if (!dropped) return;
  const std::filesystem::path tmp = path.string() + kResumeCopySuffix;
  write_text_file(tmp, kept);
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error("cannot replace '" + path.string() + "': " + ec.message());
}

nlohmann::ordered_json number_or_null(double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nullptr; }

std::string metrics_line(int step, const trace::StepRecord& rec, const StepFigures& f, const Derived& d) {
  nlohmann::ordered_json j;
  j["step"] = step;
  j["time"] = d.unix_s;
  j["elapsed_s"] = d.elapsed_s;
  j["eta_s"] = number_or_null(d.eta_s >= 0 ? d.eta_s : std::numeric_limits<double>::quiet_NaN());
  j["loss"] = number_or_null(f.loss);
  j["step_time_ms"] = d.step_ms;
  j["tokens_per_s"] = d.tokens_per_s;
  j["samples_per_s"] = rec.samples_per_s;
  j["mfu"] = number_or_null(d.mfu);
  j["lr"] = number_or_null(f.learning_rate);
  j["grad_norm"] = number_or_null(f.grad_norm);
  if (!std::isnan(f.valid_loss)) j["valid_loss"] = f.valid_loss;
  j["bubble_ratio"] = rec.bubble_ratio;
  j["peak_memory_gb"] = d.peak_memory_gb;
  j["peak_activations"] = d.peak_activations;
  return j.dump();
}

std::string wall_clock_text(double unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm local{};
  localtime_r(&t, &local);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &local);
  return buf;
}

// One fixed-width column: the number, "nan"/"inf", or "-" where the backend has no math.
std::string column(const char* format, int width, double v, bool shown) {
  char buf[48];
  if (shown && std::isfinite(v)) {
    std::snprintf(buf, sizeof buf, format, v);
  } else {
    std::snprintf(buf, sizeof buf, "%*s", width, !shown ? "-" : std::isnan(v) ? "nan" : "inf");
  }
  return buf;
}

// Fixed-width columns, so consecutive lines align.
std::string step_line(int step, int steps, const trace::StepRecord& rec, const StepFigures& f, const Derived& d,
                      bool has_math) {
  const std::string loss = column("%11.8f", 11, f.loss, has_math);
  const std::string lr = column("%9.3e", 9, f.learning_rate, has_math);
  const std::string norm = column("%9.3e", 9, f.grad_norm, has_math);
  const std::string mfu = std::isnan(d.mfu) ? column("", 7, 0, false) : column("%6.2f", 6, 100.0 * d.mfu, true) + "%";
  char line[512];
  std::snprintf(line, sizeof line,
                "step %4d/%d  loss %s  time %8.2f ms  bubble %.3f  samples/s %9.1f  tokens/s %10.0f  MFU %s  "
                "lr %s  gnorm %s  mem %7.3f GB  | %s  elapsed %s  ETA %s",
                step + 1, steps, loss.c_str(), d.step_ms, rec.bubble_ratio, rec.samples_per_s, d.tokens_per_s,
                mfu.c_str(), lr.c_str(), norm.c_str(), d.peak_memory_gb, wall_clock_text(d.unix_s).c_str(),
                format_duration(d.elapsed_s).c_str(), format_duration(d.eta_s).c_str());
  if (std::isnan(f.valid_loss)) return line;
  return std::string(line) + "  val loss " + column("%11.8f", 11, f.valid_loss, true);
}

}  // namespace

std::vector<long long> metrics_steps(const std::filesystem::path& path) {
  std::vector<long long> steps;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (const std::optional<long long> step = row_step(line)) steps.push_back(*step);
  }
  return steps;
}

RunReport::RunReport(const plan::Plan& plan, const sched::Schedule& order, int world_size, int first_step,
                     const std::vector<std::string>& hosts, bool has_math)
    : plan_(plan),
      dir_(plan.run.output),
      world_size_(world_size),
      first_step_(first_step),
      has_math_(has_math),
      samples_per_step_(static_cast<double>(plan.pipeline.m) * plan.pipeline.microbatch_size),
      tokens_per_step_(plan::tokens_per_step(plan.model, plan.pipeline)),
      model_flops_per_step_(plan::model_flops_per_step(plan.model, plan.pipeline)),
      peak_flops_(plan.runtime.peak_tflops * 1e12 * world_size),
      start_(std::chrono::steady_clock::now()) {
  measured_.samples_per_step = samples_per_step_;  // the run-level throughput (summary.json `run`)
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw InputError("run.output = '" + dir_.string() + "': cannot create the folder: " + ec.message());
  lock_folder(dir_, "run.output");
  // A resumed run (e.g. a requeued Slurm job) continues its trace (docs/trace.md, "Resumed runs"): opened first,
  // so a trace that cannot be continued is refused before resolved.yaml or the metrics change.
  const std::string trace_path = (dir_ / "trace.h5").string();
  const bool replacing = first_step > 0 && plan.run.replace_results;
  const bool continuing = plan.trace.enabled && first_step > 0 && !replacing && std::filesystem::exists(trace_path);
  if (continuing) writer_ = std::make_unique<trace::TraceWriter>(trace_path, first_step);
  write_text_file(dir_ / "resolved.yaml", plan.deck_yaml);
  // The summary of the results this run replaces (run.overwrite, or this deck's own earlier run) goes now: a run
  // that then fails must not leave it beside the new trace and metrics, read as theirs. A resumed run keeps it
  // until its own (it describes the rows the continued trace keeps).
  if (first_step == 0 || replacing) {
    std::filesystem::remove(dir_ / "summary.json", ec);
    if (ec)
      throw Error((dir_ / "summary.json").string() + ": cannot remove the replaced run's summary: " + ec.message());
  }
  // A resumed run appends to the metrics of the steps before it (the rows a killed attempt wrote past the
  // checkpoint dropped, as the trace drops them); a new one starts the file.
  const std::filesystem::path metrics_path = dir_ / kMetricsFile;
  const bool appending = first_step > 0 && !replacing;
  if (appending) keep_metrics_before(metrics_path, first_step);
  // A new file is this run's own: a symbolic link in its place (to another run's metrics) is replaced, not
  // truncated through.
  if (!appending && std::filesystem::is_symlink(metrics_path, ec)) std::filesystem::remove(metrics_path, ec);
  metrics_.open(metrics_path, appending ? std::ios::app : std::ios::trunc);
  if (!metrics_) throw Error(metrics_path.string() + ": cannot write");
  if (continuing) {
    log::info("continuing the trace " + trace_path + " at step " + std::to_string(first_step + 1));
  } else if (plan.trace.enabled) {
    if (replacing)
      log::info("replacing the results in " + dir_.string() + " (another run's: run.overwrite=true); the new trace " +
                "starts at step " + std::to_string(first_step + 1));
    writer_ = std::make_unique<trace::TraceWriter>(trace_path, run_info(plan, order, world_size, hosts));
  }
}

void RunReport::record_step(int step, const std::vector<trace::OpEvent>& all, const StepFigures& figures) {
  std::vector<trace::OpEvent> compute_events;
  for (const auto& e : all) {
    if (trace::is_compute(e.kind)) compute_events.push_back(e);
  }
  trace::StepRecord rec = trace::summarize_step(compute_events, world_size_, step, samples_per_step_);
  rec.loss = figures.loss;
  if (writer_) {
    writer_->append_events(all);
    writer_->append_step(rec);
    try {
      writer_->flush();
    } catch (const Error& e) {
      // The steps before this one stay in the file (each was flushed whole); which step failed is the news.
      throw Error("step " + std::to_string(step + 1) + ": " + e.what());
    }
  }
  measured_.steps.push_back(step_result(rec, compute_events, world_size_, figures.peak_activations));
  losses_.push_back(figures.loss);
  if (!std::isnan(figures.valid_loss)) valid_losses_.emplace_back(step, figures.valid_loss);

  Derived d;
  d.unix_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  d.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  d.eta_s = eta_seconds(d.elapsed_s, step + 1 - first_step_, plan_.run.steps - first_step_);
  d.step_ms = static_cast<double>(rec.makespan_ns) * 1e-6;
  const double step_s = d.step_ms * 1e-3;
  d.tokens_per_s = step_s > 0 ? tokens_per_step_ / step_s : 0.0;
  // Emulated ops timed by the deck's cost lists do not follow the model's FLOPs: no MFU (it read billions of
  // percent for a large model with short emulated ops). Timed from the model (cost.device_tflops) they do.
  d.mfu = !plan_.runtime.times_follow_model ? std::numeric_limits<double>::quiet_NaN()
          : step_s > 0 && peak_flops_ > 0   ? model_flops_per_step_ / step_s / peak_flops_
                                            : 0.0;
  d.peak_memory_gb = max_of(figures.peak_memory_bytes) * 1e-9;
  d.peak_activations = max_of(figures.peak_activations);
  errno = 0;
  metrics_ << metrics_line(step, rec, figures, d) << '\n' << std::flush;
  if (!metrics_) {
    throw Error("step " + std::to_string(step + 1) + ": " + (dir_ / kMetricsFile).string() + ": cannot write" +
                (errno != 0 ? std::string(": ") + std::strerror(errno) : std::string()));
  }
  if ((step + 1) % plan_.run.log_every == 0 || step + 1 == plan_.run.steps)
    log::info(step_line(step, plan_.run.steps, rec, figures, d, has_math_));
}

void RunReport::finish(const sched::Schedule& order, double memory_limit, int steps_done,
                       const PlannerFigures& planner) {
  if (writer_) writer_->close();
  metrics_.close();
  sim::finish_run(measured_, world_size_);
  const double final_loss = losses_.empty() ? std::numeric_limits<double>::quiet_NaN() : losses_.back();
  const sim::TrainingFigures training{first_step_,        losses_,       planner.orders_from_policy,
                                      planner.latency_ms, valid_losses_, planner.policy};
  write_text_file(dir_ / "summary.json",
                  sim::dump_json(sim::summary_json(measured_, plan_, order, memory_limit, training)) + "\n");
  if (!planner.latency_ms.empty()) {
    double latency_sum = 0;
    for (double l : planner.latency_ms) latency_sum += l;
    const double latency = latency_sum / static_cast<double>(planner.latency_ms.size());
    char line[320];
    std::snprintf(line, sizeof line,
                  "global tier: %d steps ran its orders, planning latency mean %.3f ms (overlapped with training; "
                  "rank 0 waited %.3f ms in all for plans)",
                  planner.orders_from_policy, latency, planner.waited_ms);
    log::info(line);
    const std::string warning =
        sched::planning_warning(latency, measured_.mean_makespan_ms, planner.waited_ms, steps_done);
    if (!warning.empty()) log::warn(warning);
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
  // The run as a whole: what a user gets when steps overlap (post-validation), as `conductor simulate` prints it.
  std::snprintf(
      line, sizeof line, "run: %.2f ms for %zu steps%s, %.1f samples/s (steady %.1f), bubble %.4f (steady %.4f)",
      measured_.span_ms, measured_.steps.size(), plan_.schedule.post_validation ? " (overlapping)" : "",
      measured_.run_throughput, measured_.steady_throughput, measured_.run_bubble_ratio, measured_.steady_bubble_ratio);
  log::info(line);
  log::info("results: " + (dir_ / "summary.json").string() + ", " + (dir_ / kMetricsFile).string() + ", " +
            (writer_ ? (dir_ / "trace.h5").string() + ", " : std::string()) + (dir_ / "resolved.yaml").string());
}

}  // namespace conductor::runtime
