#pragma once
// Rank 0's record of a run: the run folder's resolved.yaml, the trace (trace.h5, flushed every step, continued
// when a resumed run finds it), one console line per step and, at the end, summary.json and the summary lines.
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"

namespace conductor::runtime {

// What the global tier reports at the end of a run (empty without one).
struct PlannerFigures {
  int orders_from_policy = 0;
  std::vector<double> latency_ms;
};

class RunReport {
 public:
  // Creates the run folder and writes resolved.yaml; opens the trace (a new one, or the existing one continued at
  // first_step > 0). Called only once the deck and every input have passed their checks on every rank.
  // has_math: the run computes losses (an emulated run prints none).
  RunReport(const plan::Plan& plan, const sched::Schedule& order, int world_size, int first_step,
            const std::vector<std::string>& hosts, bool has_math);

  // One step: every rank's events, the per-rank memory peaks, the step's loss (NaN without math) and its
  // validation loss (NaN when none was computed). Appends to the trace and prints the step line.
  void record_step(int step, const std::vector<trace::OpEvent>& all, const std::vector<double>& peaks, double loss,
                   double valid_loss = std::numeric_limits<double>::quiet_NaN());

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
  std::unique_ptr<trace::TraceWriter> writer_;
  sim::RunResult measured_;
  std::vector<double> losses_;
  std::vector<std::pair<int, double>> valid_losses_;  // (step, loss)
};

}  // namespace conductor::runtime
