#pragma once
// The per-rank driver: everything one rank decides and remembers during one training step, written once and run
// by every consumer on its own clock:
//   - the virtual-time engine (engine.hpp: the simulator, the schedule generators, the validator and the PPO
//     environment) runs p drivers from an event queue;
//   - the MPI executor (runtime/executor.hpp) runs one driver fed by message polls and op completions;
//   - a replay of a runtime trace (trace events in time order) feeds fresh drivers and gets the runtime's picks.
//
// The driver owns the rank's Arbiter (arbiter.hpp: readiness, memory, ranking) and the step's times: when each
// action became ready, when the rank last became free, its first start and last end. Times are in the caller's
// unit (ms in the engine, ns since the step began in the runtime); the driver never reads a clock.
//
// A step, per rank:
//   driver.begin(t0);                                   // actions without inputs are ready at t0
//   on an input for action i arriving at t:  driver.input_arrived(i, t);
//   on an announcement received at t:        driver.announce(i, expected, t);   (Hint::Backfill only)
//   when the rank can start an op at t:      i = driver.next();  if (i >= 0) driver.start(i, t);
//   when op i ends at t:                     driver.complete(i, t);
// next(now) is the arbiter's choice under the driver's execution mode and hint; candidates(now) lists every
// feasible choice best first (next(now) is its first element), for a picker that chooses differently (the PPO
// environment).
//
// Backfilling (readiness with Hint::Backfill; the idea of EASY backfilling in batch schedulers): the hint list is
// a reservation. The list's next op runs as soon as it can (when its output stays on this rank and the list's next
// op that feeds another rank is ready with only ready ops between them, that op first: the ready segment ends at
// the same time in either order). While it waits for an input, another ready op may
// start only if its estimated end is no later than the time that input is expected (announce(): the producer
// announces when it starts the op; until then nothing is expected and nothing is backfilled; a late input, one
// expected by now, stops backfilling). Among those, ops whose output another rank waits for go first. The
// rank's memory budget is the list's own peak on that rank (capped by the configured limit). With
// exact estimates this never delays the list's order, so backfilling is never slower than strict when nothing
// varies; under noise it fills the gaps late inputs open.
#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/migration.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

// Expected duration of one of this rank's actions (ms, or the caller's unit): the noise-free cost model in the
// simulator, measured durations at run time. Backfilling (Hint::Backfill) starts an op out of list order only if
// it is expected to end before the list's next op can start.
using OpEstimate = std::function<double(const Action& action)>;

// Measured durations of one rank's ops by (kind, chunk): the MPI runtime's estimates for backfilling. The
// executor measures a step and estimates the next one with it (the mean of the same kind and chunk); the first
// step has no measurement, so nothing is backfilled in it. A replay rebuilds the same table from the trace's
// previous step: durations are integer ns, so their sums (below 2^53) are exact in any order.
class MeasuredDurations {
 public:
  void add(const Action& action, double duration);
  bool empty() const { return sums_.empty(); }
  // The mean of the recorded durations of the action's kind and chunk; +infinity where none was recorded (such
  // an op is never backfilled, and its start announces no arrival time).
  OpEstimate estimate() const;
  // How far durations stray from those means: the pooled standard deviation of log(duration) within each kind
  // and chunk (what the simulator passes as DriverOptions::spread, its noise's log-normal sigma). 0 when no kind
  // and chunk has two durations. Each key's logs are summed in sorted order, so the figure does not depend on
  // the order the durations were added in (a replay adds them in trace order).
  // With carry_spread, pooled with the earlier steps' deviations (each around its own step's means, so a rank
  // that slows from one step to the next adds no spread).
  double spread() const;
  // Pools `earlier`'s deviations (and what it pooled) into spread(): conductor run's spread is measured over every
  // step so far, not the previous step's ops alone, whose estimate strayed by about +-0.2 around a sigma of 0.65
  // and switched backfilling to critical and back from step to step where the simulator's noise keeps one ranking.
  void carry_spread(const MeasuredDurations& earlier);

 private:
  // The squared deviations of the logs around their kind and chunk's mean, and their degrees of freedom, pooled
  // over this step's durations and the carried ones.
  std::pair<double, int> log_squares() const;
  std::map<std::pair<int, int>, std::pair<double, int>> sums_;  // (kind, chunk) -> (sum, count)
  std::map<std::pair<int, int>, std::vector<double>> durations_;
  double carried_squares_ = 0.0;
  int carried_degrees_ = 0;
};

// Backfill under a wide spread (DriverOptions::spread >= wide_spread and > 0, a log-normal sigma; kWideSpread unless
// the deck says otherwise: schedule.wide_spread) ranks as `critical` with the configured memory limit: an op's time
// then strays from its estimate by a factor of 0.55 to 1.8 or more, the list's order is a guess that reservations
// only enforce, and the critical-path ranking won on every list and deck measured (docs/design.md, "Readiness
// hints"). ranking(): the ranking a driver with these options uses.
inline constexpr double kWideSpread = plan::kWideSpread;

struct DriverOptions {
  Execution execution = Execution::Strict;
  Hint hint = Hint::Schedule;
  double memory_limit = 0.0;  // this rank's limit, M_F; <= 0: unlimited
  double memory_after_b = 0.0;
  OpEstimate estimate;  // Backfill only; empty: nothing is backfilled before the list's next op is late
  // Backfill only: what the driver knows of how far actual times stray from the estimates. spread: the log-normal
  // sigma of an op's duration around its estimate (the estimate is the mean): an op may start if it ends before
  // the awaited input with probability 0.4 under heavy variability (sigma >= 0.5), 0.6 under small jitter
  // (driver.cpp), and from wide_spread on the driver ranks as critical (ranking()); the runtime measures it
  // (MeasuredDurations::spread). late_delay: a transfer is either on time or
  // late by this much (congestion): a late input is then expected late_delay after its announced time, and ops
  // that end by then may start. Both 0 (exact estimates): ops must end by the announced arrival on estimate, and
  // a late input stops backfilling until it arrives.
  double spread = 0.0;
  double late_delay = 0.0;
  // Backfill only: how far inputs arrive from their announced times, the standard deviation of a transfer's extra
  // delay in units of the mean forward time: the noise model's congestion (sim::NoiseModel::arrival_spread), in
  // the simulator and in the runtime that injects it. From wide_spread on it ranks as critical too: the
  // reservations then rest on arrival times that miss by most of an op.
  double arrival_spread = 0.0;
  double wide_spread = kWideSpread;  // from this spread on, backfill ranks as critical (ranking())
  Migration migration;               // computation migration (migration.hpp); default: disabled
};

// The ranking a driver with these options uses: the hint, or critical for backfill under a wide spread of op
// times or of input arrivals.
Hint ranking(const DriverOptions& options);

// What the driver knows of an op when it starts.
struct OpStart {
  int index = 0;     // position in the rank's list
  double ready = 0;  // startable since: inputs arrived, same-stage predecessor done and memory fits
  double start = 0;  // now
  double wait = 0;   // the rank's idle time right before this op (since its last op ended, or since begin)
};

class RankDriver {
 public:
  RankDriver(const Schedule& schedule, int rank, const DriverOptions& options);

  // A new step begins at `now`: nothing started, no input arrived.
  void begin(double now);
  // The cross-rank input of action `index` is usable from `now` on.
  void input_arrived(int index, double now);
  // At `now` the driver learns that the producer of action `index`'s cross-rank input started it: the input is
  // expected at `expected_ready`.
  void announce(int index, double expected_ready, double now);
  // The choice now, or -1 (stay idle until the next event). Does not change the state.
  int next(double now) const;
  // Every action that could start now, best first (empty when next(now) is -1).
  const std::vector<int>& candidates(double now);
  // Action `index` starts at `now` (normally next() or one of candidates()).
  OpStart start(int index, double now);
  // Action `index` ended at `now`: frees memory, readies same-stage dependents and same-rank consumers.
  void complete(int index, double now);
  // Computation migration: how action `index`, starting at `now` and estimated to take `estimate` alone, is
  // shared with one of the peers in `offers` (Migration::decide; helper -1: alone). Does not change the state.
  const Migration& migration() const { return options_.migration; }
  Offload offload(int index, double now, double estimate, const std::vector<HelpOffer>& offers) const {
    return options_.migration.decide(arbiter_.actions()[static_cast<std::size_t>(index)].kind, now, estimate, offers);
  }

  const Arbiter& arbiter() const { return arbiter_; }
  const DriverOptions& options() const { return options_; }
  int rank() const { return arbiter_.rank(); }
  bool finished() const { return arbiter_.finished(); }
  int in_flight() const { return started_ - arbiter_.num_done(); }  // started, not complete
  bool running() const { return in_flight() > 0; }
  // When action `index`'s inputs were in (its cross-rank input arrived, its same-stage predecessor done).
  double ready_at(int index) const { return ready_at_[static_cast<std::size_t>(index)]; }
  // When it could start: its inputs in and, for an F, its memory free (the trace's ready_ns: idle time with an
  // F held back by the memory limit is no op's choice, not "ready but not picked").
  double startable_at(int index) const {
    const std::size_t i = static_cast<std::size_t>(index);
    return std::max(ready_at_[i], fits_at_[i]);
  }
  double free_since() const { return free_since_; }  // end of the last op (or begin)
  bool started_any() const { return started_ > 0; }
  double first_start() const { return first_start_; }
  double last_end() const { return last_end_; }
  // The time of the latest event the driver was told of (begin, an arrival, an announcement, a completion). The
  // MPI executor decides at this time rather than at its clock's now: between two events the choice cannot
  // change except by growing stricter, and a replay of the trace, which knows the events but not the instants of
  // the runtime's polls, then makes the same choice. In the engine the two are the same time.
  double latest() const { return latest_; }

 private:
  void stamp_ready(double now);
  // Stamps fits_at_ for the Fs that fit in memory from `now` on (after begin and after each completion: only a
  // completion frees memory). Once an F fits it fits until it starts (the arbiter's reservations: starting an F
  // leaves every other F's room as it was, or, for an F listed after it, starts only when that one fits too), so
  // the Fs that fit are a prefix of the unstarted ones in list order, and a cursor walks them once per step.
  void stamp_fits(double now);
  bool backfilling() const { return options_.execution == Execution::Readiness && ranking_ == Hint::Backfill; }
  // Backfill: the list's next op, or (when it waits) the ops that may start before it, best first.
  void backfill_candidates(double now, std::vector<int>& out) const;
  // Backfill, when the list's next op cannot run: until when other ops may run (+infinity: any op; not after
  // `now`: none).
  double backfill_until(double now) const;
  // Backfill: the list's next op `next` (ready) or, when its output stays here, the list's next op that feeds
  // another rank if it is ready with only ready ops between (the ready segment's end does not move).
  int ahead_of(int next) const;
  // Backfill: backfill_candidates' first element without listing them (next()'s hot path).
  int backfill_first(double now) const;
  void build_buckets();
  void clean_bucket(int index);
  // Backfill: until when the next op's late input (expected before `now`) is still expected, or -infinity.
  double late_until(int index, double now) const;

  Hint ranking_ = Hint::Schedule;  // how it ranks: the hint, or critical for backfill under a wide spread
  Arbiter arbiter_;                // after ranking_: its memory budget depends on the ranking
  DriverOptions options_;
  std::vector<double> ready_at_;
  std::vector<double> fits_at_;   // per action: when its memory fit (0 for B, W, BW: they only free memory)
  std::vector<int> forwards_;     // the list positions of the Fs, in list order
  std::size_t fits_cursor_ = 0;   // the first of forwards_ not yet stamped
  double fit_scale_ = 1.0;        // an op's estimate times this must fit the gap (1 with exact estimates)
  std::vector<double> expected_;  // announced arrival of each action's cross-rank input (NaN: none yet)
  std::vector<int> candidates_;
  // Backfill's ready ops, kept ranked so that next() selects without sorting: one bucket per (class: feeds
  // another rank or not, F or not, estimate), each a min-heap of list positions. Within a bucket the first
  // position is the best op, the only one that may fit in memory if any does (an F's reservation grows with its
  // position), and it fits the gap exactly when the others do (same estimate); so next() looks at one op per
  // bucket. A bucket's first op is never started (start() pops started ones).
  struct Bucket {
    double estimate = 0;
    bool local = false;  // its output stays on this rank: ranked after every op that feeds another rank
    bool forward = false;
    std::vector<int> heap;
  };
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;    // list position -> bucket
  std::vector<int> next_remote_;  // list position -> the next position that feeds another rank (size(): none)
  double begin_ = 0, free_since_ = 0, first_start_ = 0, last_end_ = 0, latest_ = 0;
  int started_ = 0;
};

}  // namespace conductor::sched
