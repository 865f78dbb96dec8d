#pragma once
// The discrete-event execution engine in virtual time: p per-rank drivers (driver.hpp) fed from one event
// queue; each free rank starts its driver's choice; op and transfer durations come from the caller. The simulator
// (sim/) drives it with the noisy cost model, generators drive it noise-free to measure candidate schedules. Events at
// equal times are all applied before any free rank picks, and ranks pick in rank order, so results are deterministic.
#include <functional>
#include <string>
#include <vector>

#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/driver.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/util/error.hpp"

namespace conductor::sched {

// What a custom picker (ExecOptions::picker) sees when a free rank picks: the engine's state at `now`. Each
// rank's past (readiness, ready times, memory, when it became free) is in its driver; the engine adds what only
// virtual time knows (when running ops will end).
struct EngineView {
  double now = 0;
  const std::vector<RankDriver>* ranks = nullptr;
  const std::vector<double>* busy_until = nullptr;  // per rank: end of its running (or last) op
  double horizon = 0;                               // latest end of any started op
  double idle = 0;  // rank-time spent idle so far (ranks not running, from the first start on), ms x ranks
  int done = 0;     // ops finished, all ranks
  int total = 0;    // ops of the step, all ranks
};

// Chooses the list position a free rank starts now, or -1 to leave it idle until the next event. It chooses
// among the rank's candidates (RankDriver::candidates(), best first); the arbiter's choice is the default.
using Picker = std::function<int(int rank, RankDriver& driver, const EngineView& view)>;

struct ExecOptions {
  Execution execution = Execution::Strict;
  Hint hint = Hint::Schedule;
  double memory_limit = 0.0;              // M_F per rank; <= 0: unlimited
  std::vector<double> rank_memory_limit;  // per rank, overrides memory_limit when not empty
  double memory_after_b = 0.0;
  bool record_transfers = false;
  bool record_ops = true;  // fill ExecResult::ops (per-op timings); off saves memory on huge runs
  Picker picker;           // empty: the arbiter picks (execution, hint); set: the policy environment's
  // Backfilling (Hint::Backfill, driver.hpp): expected op durations (noise-free; empty: the actual durations,
  // i.e. exact estimates) and expected transfer time. A rank announces each op whose output goes to another
  // rank when it starts it; the announcement takes announce_latency to arrive.
  std::function<double(int rank, const Action& action)> estimate;
  double comm_estimate = 0.0;
  double announce_latency = 0.0;
  double spread = 0.0, late_delay = 0.0, arrival_spread = 0.0;  // DriverOptions' (driver.hpp)
  double wide_spread = kWideSpread;                             // DriverOptions::wide_spread
  // Computation migration (migration.hpp): one per rank (sched::migrations), empty = off. A peer's offer holds
  // until its next list op's input is expected: its producer's start plus the op's predicted time (estimate, or
  // with help the decision's) plus comm_estimate. helper_speed: a helper's time factor for the slices of an
  // action (the noise of that rank; empty: 1).
  std::vector<Migration> migration;
  std::function<double(int rank, const Action& action)> helper_speed;
  // Overlapping steps (sim::StepClock): per rank, no op starts before this time (when the rank finished its
  // previous step); an op's ready time is never earlier. Empty: every rank may start at 0.
  std::vector<double> release;
};

// A rank that cannot finish: the action it is stuck at and why (an input whose producer never runs, or memory).
struct Stuck {
  int rank = 0;
  int position = 0;     // list position of the first action not started
  bool memory = false;  // ready, but starting it would exceed the memory limit
  std::string reason;
};

// Thrown by execute() when ranks cannot finish; what() names every stuck rank, `stuck` lists them with the
// root cause first (a rank stuck on memory, else the lowest stuck rank).
class DeadlockError : public Error {
 public:
  DeadlockError(const std::string& what, std::vector<Stuck> stuck) : Error(what), stuck(std::move(stuck)) {}
  std::vector<Stuck> stuck;
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

// One migrated op: `helper` computed `slices` of the owner's action from `start` to `end` (its help, transfers
// included), moving `bytes` over the owner-helper link.
struct MigrationTiming {
  int owner = 0, index = 0, helper = 0, slices = 0;
  double start = 0, end = 0, bytes = 0, helper_compute = 0;
};

// A refresh of an owner's weight replicas on a holder after the optimizer step (migration.weights: replicas):
// sent from the step's start, in ready = when it is in (ms on the step's clock).
struct ReplicaRefresh {
  int owner = 0, holder = 0;
  double bytes = 0, ready = 0;
};

struct ExecResult {
  std::vector<OpTiming> ops;                  // in start order (when record_ops)
  std::vector<TransferTiming> transfers;      // cross-rank only, when record_transfers
  std::vector<std::vector<int>> order;        // realized order per rank (list indices)
  std::vector<double> busy;                   // per rank, ms of compute
  std::vector<double> first_start, last_end;  // per rank
  std::vector<double> peak_memory;            // per rank, M_F (in-flight slices and replicas included)
  std::vector<MigrationTiming> migrations;    // every migrated op (with ExecOptions::migration)
  std::vector<ReplicaRefresh> refreshes;      // the step's replica refreshes (migration.weights: replicas)
  double start = 0, end = 0;                  // first op start, last op end over all ranks
  double makespan() const { return end - start; }
  // Largest per-rank span minus work: the Zero Bubble paper's bubble measure.
  double max_rank_bubble() const;
};

using ComputeTimeFn = std::function<double(int rank, const Action& action)>;
using CommTimeFn = std::function<double(const Transfer& transfer)>;

// Runs one step. Throws DeadlockError naming each stuck rank's next action when the schedule deadlocks.
ExecResult execute(const Schedule& schedule, const ExecOptions& options, const ComputeTimeFn& compute,
                   const CommTimeFn& comm);

// The schedule as another schedule whose lists are the realized orders of `result` (same p, m, v, placement).
Schedule realized(const Schedule& schedule, const ExecResult& result);

}  // namespace conductor::sched
