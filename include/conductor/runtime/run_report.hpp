#pragma once
// Rank 0's record of a run: the run folder's resolved.yaml, the trace (trace.h5, flushed every step, continued
// when a resumed run finds it), metrics.jsonl (one JSON object per step, flushed every step, appended to by a
// resumed run), a console line every run.log_every steps and, at the end, summary.json and the summary lines.
// The per-step figures (docs/trace.md, "metrics.jsonl"): time stamps, elapsed time and ETA, loss, step time,
// tokens/s and samples/s, MFU, learning rate, gradient norm, peak memory.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"

namespace conductor::runtime {

// The per-step metrics file in the run folder, and the suffix of its copy while a resume trims it (renamed over it).
inline constexpr const char* kMetricsFile = "metrics.jsonl";
inline constexpr const char* kResumeCopySuffix = ".resume.tmp";
// The steps the metrics file at `path` holds rows for, in file order (none when it is not there; a line that is not
// a JSON object with an integer "step", such as a torn last line, is no row): what a resume's checks compare with
// its checkpoint.
std::vector<long long> metrics_steps(const std::filesystem::path& path);

// What the global tier reports at the end of a run (empty without one).
struct PlannerFigures {
  int orders_from_policy = 0;
  std::vector<double> latency_ms;
  double waited_ms = 0;                         // rank 0's waits for plans not done in time (PlanAhead::waited_ms)
  const sched::PolicySource* policy = nullptr;  // the planner's policy file (OrderPlanner::policy_source)
};

// What the ranks measured in a step beyond the events (NaN where the backend has no math).
struct StepFigures {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
  double learning_rate = std::numeric_limits<double>::quiet_NaN();
  double valid_loss = std::numeric_limits<double>::quiet_NaN();  // NaN: no validation this step (eval.every)
  std::vector<double> peak_activations;                          // per rank, M_F (the executor's memory model)
  std::vector<double> peak_memory_bytes;                         // per rank, Compute::peak_memory_bytes
};

class RunReport {
 public:
  // Creates the run folder and writes resolved.yaml; opens the trace (a new one, or the existing one continued at
  // first_step > 0). Called only once the deck and every input have passed their checks on every rank.
  // has_math: the run computes losses (an emulated run prints none).
  RunReport(const plan::Plan& plan, const sched::Schedule& order, int world_size, int first_step,
            const std::vector<std::string>& hosts, bool has_math);

  // One step: every rank's events and the step's figures. Appends to the trace and metrics.jsonl and prints the
  // step line when due (run.log_every, and the last step).
  void record_step(int step, const std::vector<trace::OpEvent>& all, const StepFigures& figures);

  // Closes the trace and writes summary.json; prints the summary lines.
  void finish(const sched::Schedule& order, double memory_limit, int steps_done, const PlannerFigures& planner);

  const std::vector<double>& losses() const { return losses_; }
  const std::vector<std::pair<int, double>>& valid_losses() const { return valid_losses_; }

 private:
  const plan::Plan& plan_;
  std::filesystem::path dir_;
  int world_size_;
  int first_step_;
  bool has_math_;
  double samples_per_step_;
  double tokens_per_step_;
  double model_flops_per_step_;
  double peak_flops_;  // all ranks together, FLOP/s
  std::chrono::steady_clock::time_point start_;
  std::ofstream metrics_;
  std::unique_ptr<trace::TraceWriter> writer_;
  sim::RunResult measured_;
  std::vector<double> losses_;
  std::vector<std::pair<int, double>> valid_losses_;  // (step, loss)
};

}  // namespace conductor::runtime
