#pragma once
// Noise models on top of the cost model, deterministic per seed AND independent of execution order: every
// perturbation is a pure function of (noise.seed, step, virtual stage, microbatch, op kind) for compute, and
// of (noise.seed, step, link, microbatch burst, direction) for transfers, through a counter-based hash (no
// sequential RNG stream). So the MPI runtime, which injects the same model as real delays in whatever order
// its ops happen, adds exactly the delay the simulator modelled for that op.
//
// Models (noise.kind, composable as a list; factors multiply, delays add):
//   gaussian       compute x max(0.05, 1 + level * z)                     z ~ N(0, 1) per op
//   lognormal      compute x exp(level * z - level^2 / 2)                 (mean 1)
//   heterogeneous  compute x exp(level * z_rank)                          z_rank fixed per rank for the run
//   sample         compute x exp(level * z_mb - level^2 / 2)              z_mb ~ N(0, 1) per (step, microbatch),
//                  the same on every stage and op kind: a heavier sample (longer sequences, more images) is
//                  heavier everywhere it goes, as in RRFP's multimodal workloads; the others draw per op
//   straggler      compute x straggler_factor on straggler_rank during steps [start, start + steps)
//   congestion     + congestion_delay ms on a transfer whose (link, direction, burst of congestion_burst
//                  microbatches) is on, which happens with probability congestion_prob per step
// Transfers between ranks take cost.comm (+ bytes / bandwidth, folded in the cost model) plus congestion;
// transfers within a rank take 0.
#include <cstdint>
#include <string>
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sim {

// Counter-based hash of a key sequence (splitmix64 finalizer chained over the words).
std::uint64_t hash_words(std::initializer_list<std::uint64_t> words);
double hash_uniform(std::uint64_t h);  // in [0, 1)
double hash_normal(std::uint64_t h);   // N(0, 1) by Box-Muller on two derived uniforms

class NoiseModel {
 public:
  // p, v and placement come from the schedule (the hash uses virtual stages); the cost model gives base times.
  NoiseModel(const sched::Schedule& schedule, sched::CostModel cost, const plan::Noise& noise);
  // The plan's noise over the plan's costs.
  static NoiseModel from_plan(const plan::Plan& plan, const sched::Schedule& schedule);

  // Time of one compute op (ms): base time of (rank, kind) for one chunk, times the compute factor.
  double compute_time_ms(int step, int rank, int chunk, int microbatch, sched::OpKind kind) const;
  // Multiplicative perturbation of that op (1 = none).
  double compute_factor(int step, int rank, int chunk, int microbatch, sched::OpKind kind) const;
  // Time of one stage-to-stage transfer (ms): 0 within a rank, else comm + congestion delay.
  double comm_time_ms(int step, int from_stage, int to_stage, int microbatch, sched::Payload payload) const;
  double comm_time_ms(int step, const sched::Transfer& t) const {
    return comm_time_ms(step, t.from_stage, t.to_stage, t.microbatch, t.payload);
  }

  const sched::CostModel& cost() const { return cost_; }
  bool any() const { return gaussian_ || lognormal_ || sample_ || heterogeneous_ || straggler_ || congestion_; }
  int straggler_rank() const { return straggler_rank_; }
  double congestion_delay_ms() const { return congestion_delay_; }
  // The log-normal sigma of an op's duration around its cost-model time (jitter: gaussian, lognormal and sample
  // levels combined; a straggler or a heterogeneous rank is not variance), what backfilling knows of the noise.
  double duration_spread() const;
  // The standard deviation of a transfer's extra delay (congestion: congestion_delay with probability
  // congestion_prob) in units of the mean forward time: DriverOptions::arrival_spread, in the simulator and in the
  // runtime that injects it.
  double arrival_spread() const;

 private:
  int p_, v_;
  sched::Placement placement_;
  sched::CostModel cost_;
  plan::Noise cfg_;
  bool gaussian_ = false, lognormal_ = false, sample_ = false, heterogeneous_ = false, straggler_ = false,
       congestion_ = false;
  int straggler_rank_ = -1;
  double congestion_delay_ = 0.0;
  double duration_spread_ = 0.0;
  std::vector<double> rank_factor_;  // heterogeneous
};

}  // namespace conductor::sim
