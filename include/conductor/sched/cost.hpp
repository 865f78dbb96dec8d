#pragma once
// The noise-free cost model: per-rank F, B, W times (ms per microbatch for the rank's whole share of the
// model; one chunk of v takes 1/v of it), the time of a point-to-point transfer, and the memory model's
// fraction a (memory_after_b). Generators plan with it; the simulator perturbs it (sim/noise.hpp).
#include <vector>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

// The plan's costs (plan::Costs: forward, backward_input, backward_weight, comm, memory_after_b) with the
// queries the generators and the simulator ask of them.
struct CostModel : plan::Costs {
  CostModel() = default;
  CostModel(const plan::Costs& costs) : plan::Costs(costs) {}  // NOLINT: a plan's costs are a cost model

  // Time of one action of one chunk on `rank` (v chunks per rank); BW = B + W.
  double op_time(int rank, OpKind kind, int v) const;
  double comm_time() const { return comm; }
  // Whole-rank F+B+W time of one microbatch (the lower bound per microbatch on that rank).
  double work_per_microbatch(int rank) const;
};

// A uniform cost model (F, B, W equal on every rank), handy for tests and generators.
CostModel uniform_cost(double f, double b, double w, double comm = 0.0, double memory_after_b = 0.0);

// The memory model's default fraction a from the model dimensions (config::resolve applies it).
using plan::memory_after_b_from_model;

}  // namespace conductor::sched
