#pragma once
// The discrete-event execution engine in virtual time: every rank runs the arbiter (arbiter.hpp) whenever it
// is free; op and transfer durations come from the caller. The simulator (sim/) drives it with the noisy
// cost model, generators drive it noise-free to measure candidate schedules. Events at equal times are all
// applied before any free rank picks, and ranks pick in rank order, so results are deterministic.
#include <functional>
#include <vector>

#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

struct ExecOptions;

// What a custom picker (ExecOptions::picker) sees when a free rank picks: the engine's state at `now`.
struct EngineView {
  double now = 0;
  const std::vector<RankState>* ranks = nullptr;
  const std::vector<char>* running = nullptr;                  // per rank: an op is running
  const std::vector<double>* free_since = nullptr;             // per rank: end of its last op
  const std::vector<double>* busy_until = nullptr;             // per rank: end of its running (or last) op
  const std::vector<std::vector<double>>* ready_at = nullptr;  // per rank and list position
  const std::vector<std::vector<int>>* ready = nullptr;        // per rank: ready, not started list positions
  double horizon = 0;                                          // latest end of any started op
  double idle = 0;  // rank-time spent idle so far (ranks not running, from the first start on), ms x ranks
  int done = 0;     // ops finished, all ranks
  int total = 0;    // ops of the step, all ranks
};

// Chooses the list position a free rank starts now, or -1 to leave it idle until the next event. It may pick
// any ready op that fits the memory rule (RankState::fits); the arbiter (RankState::pick) is the default.
using Picker = std::function<int(int rank, const EngineView& view)>;

struct ExecOptions {
  Execution execution = Execution::Strict;
  Hint hint = Hint::Schedule;
  double memory_limit = 0.0;              // M_F per rank; <= 0: unlimited
  std::vector<double> rank_memory_limit;  // per rank, overrides memory_limit when not empty
  double memory_after_b = 0.0;
  bool record_transfers = false;
  bool record_ops = true;  // fill ExecResult::ops (per-op timings); off saves memory on huge runs
  Picker picker;           // empty: the arbiter picks (execution, hint); set: the policy environment's
};

struct OpTiming {
  int rank = 0;
  int index = 0;     // position in the rank's list
  double ready = 0;  // all inputs arrived and predecessors done (ms)
  double start = 0;
  double end = 0;
  double wait = 0;  // idle time on the rank right before this op
};

struct TransferTiming {
  Transfer transfer;
  double sent = 0;     // producer finished
  double arrived = 0;  // consumer's input available
};

struct ExecResult {
  std::vector<OpTiming> ops;                  // in start order (when record_ops)
  std::vector<TransferTiming> transfers;      // cross-rank only, when record_transfers
  std::vector<std::vector<int>> order;        // realized order per rank (list indices)
  std::vector<double> busy;                   // per rank, ms of compute
  std::vector<double> first_start, last_end;  // per rank
  std::vector<double> peak_memory;            // per rank, M_F
  double start = 0, end = 0;                  // first op start, last op end over all ranks
  double makespan() const { return end - start; }
  // Largest per-rank span minus work: the Zero Bubble paper's bubble measure.
  double max_rank_bubble() const;
};

using ComputeTimeFn = std::function<double(int rank, const Action& action)>;
using CommTimeFn = std::function<double(const Transfer& transfer)>;

// Runs one step. Throws Error naming each stuck rank's next action when the schedule deadlocks.
ExecResult execute(const Schedule& schedule, const ExecOptions& options, const ComputeTimeFn& compute,
                   const CommTimeFn& comm);

// The schedule as another schedule whose lists are the realized orders of `result` (same p, m, v, placement).
Schedule realized(const Schedule& schedule, const ExecResult& result);

}  // namespace conductor::sched
