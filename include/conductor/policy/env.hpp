#pragma once
// The PPO environment: one training step of a schedule in virtual time, run BY sched::execute (engine.hpp,
// the simulator's engine, with the same per-rank arbiter state sched::Arbiter), with a picker
// (ExecOptions::picker) through which, at each decision point, the caller's chooser picks among the feasible
// ops instead of the hint ranking.
//
// Decision point: a rank is free and its feasible set (the ready actions that fit the memory rule, i.e.
// exactly what Arbiter::pick(readiness, .) chooses from) is not empty. The candidates offered are, per
// (op kind, chunk), the earliest-listed feasible op (at most 3v of them): the arbiter's own choice is always
// among them, and a later microbatch of the same kind and chunk would only delay the earlier one. Events at equal times
// are all applied before any free rank picks, and free ranks pick in rank order, as in execute(). With a chooser that
// always takes heuristic rank 0 the rollout IS readiness execution under that hint (tested).
//
// Features are size-independent (ratios, op-time units, ranks among candidates), so one policy applies to any
// p, m and v. kFeatureVersion changes whenever their definition changes; policy files record it.
#include <array>
#include <cstdint>
#include <functional>
#include <vector>

#include "conductor/sched/arbiter.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/engine.hpp"
#include "conductor/sched/migration.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::policy {

inline constexpr int kFeatureVersion = 1;
inline constexpr int kNumFeatures = 19;    // per candidate (list in env.cpp)
inline constexpr int kNumGlobal = 8;       // per decision, for the critic
inline constexpr int kMaxCandidates = 12;  // the heuristic's best kMaxCandidates feasible ops are offered

// One decision point with at least two candidates (single-candidate points are not decisions).
struct Decision {
  int rank = 0;
  double time = 0;
  int num_candidates = 0;
  std::array<int, kMaxCandidates> index{};                      // list positions, heuristic order (best first)
  std::array<float, kMaxCandidates * kNumFeatures> features{};  // [num_candidates][kNumFeatures]
  std::array<float, kNumGlobal> global{};
  int chosen = 0;   // position in index[]
  double idle = 0;  // idle rank-time accumulated over all ranks up to this decision (ms x ranks)
};

// Returns the position (0 .. num_candidates-1) of the candidate to start.
using Chooser = std::function<int(const Decision&)>;

struct EnvOptions {
  sched::Hint heuristic = sched::Hint::BFW;  // ranking behind the heuristic-rank feature
  double memory_limit = 0;                   // M_F per rank, <= 0 unlimited
  double memory_after_b = 0;
  // Computation migration (sched/migration.hpp), one per rank, empty = off: the local tier's decision runs in
  // the rollout as in the simulator (the owner decides on the predicted cost model's op time; a helper's speed is
  // its actual over its predicted time for the action).
  std::vector<sched::Migration> migration;
  // A window of steps (schedule.post_validation; sim::StepClock's overlapping steps): the rollout runs `steps`
  // steps one after another, and with overlap_steps each rank starts step k+1 when it has finished its own ops
  // of step k (its optimizer step takes no time, the global check is post-validated), so step k+1's ops on the
  // first ranks run beside step k's tail; without it step k+1 starts when step k has ended on every rank.
  int steps = 1;
  bool overlap_steps = false;
};

// The plan's migration for `schedule` (empty when migration.enabled is false): what EnvOptions::migration takes.
std::vector<sched::Migration> env_migration(const plan::Plan& plan, const sched::Schedule& schedule);

// Over a window of steps: order is the first step's; start is the first op of the first step, end the last op
// of the last step, busy summed over the steps (so idle() is the window's bubble on the global measure).
struct Rollout {
  std::vector<std::vector<int>> order;  // realized order per rank (list indices)
  double start = 0, end = 0;            // first op start, last op end
  double makespan() const { return end - start; }
  std::vector<double> busy;  // per rank
  double idle() const;       // p x makespan - sum of busy: the bubble, in rank-ms
};

// Runs one step (or EnvOptions::steps). `compute`/`comm` give the durations (noisy in training, estimates when
// planning); `predicted` is what the features show as an op's predicted duration (the planner's cost model).
// Decisions with two or more candidates are passed to `choose` and, when `record` is given, appended to it (a
// decision's idle counts from the window's start). Throws Error on deadlock.
Rollout rollout(const sched::Schedule& schedule, const EnvOptions& options, const sched::CostModel& predicted,
                const sched::ComputeTimeFn& compute, const sched::CommTimeFn& comm, const Chooser& choose,
                std::vector<Decision>* record = nullptr);

// Mean chunk-op time of a cost model (ms): the time unit of the features.
double time_unit(const sched::CostModel& cost, int v);

}  // namespace conductor::policy
