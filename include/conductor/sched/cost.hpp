#pragma once
// The noise-free cost model: per-rank F, B, W times (ms per microbatch for the rank's whole share of the
// model; one chunk of v takes 1/v of it), the time of a point-to-point transfer, and the memory model's
// fraction a (memory_after_b). Generators plan with it; the simulator perturbs it (sim/noise.hpp).
#include <vector>

#include "conductor/config/deck.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

struct CostModel {
  std::vector<double> forward{1.0};  // ms, one per rank (or one value for all)
  std::vector<double> backward_input{1.0};
  std::vector<double> backward_weight{1.0};
  double comm = 0.0;            // ms per cross-rank transfer
  double memory_after_b = 0.0;  // a: fraction of M_F held between B and W

  // Time of one action of one chunk on `rank` (v chunks per rank); BW = B + W.
  double op_time(int rank, OpKind kind, int v) const;
  double comm_time() const { return comm; }
  // Whole-rank F+B+W time of one microbatch (the lower bound per microbatch on that rank).
  double work_per_microbatch(int rank) const;
};

// A uniform cost model (F, B, W equal on every rank), handy for tests and generators.
CostModel uniform_cost(double f, double b, double w, double comm = 0.0, double memory_after_b = 0.0);

// The deck's cost model: cost.forward/backward_* per rank, or, with cost.device_tflops > 0, derived from the
// model dimensions (see from_model below); comm = cost.comm (+ activation bytes / cost.bandwidth_gbps).
CostModel from_deck(const config::Deck& deck);

// Per-layer FLOPs of a GPT layer for one microbatch of `tokens` tokens, width h, sequence s:
// matmuls 24*tokens*h^2 per pass, attention 4*tokens*s*h. F = mm + att, B = mm + 2 att, W = mm; the last rank
// also runs the LM head (2*tokens*h*vocab per pass). Times = FLOPs / (tflops * 1e12), in ms.
CostModel cost_from_model(const config::Deck& deck);

// Activation bytes of one microbatch crossing a stage boundary (fp32: microbatch_size * seq_len * d_model * 4).
double activation_bytes(const config::Deck& deck);

// The Zero Bubble paper's fraction of a GPT layer's activations still needed by W after B:
// 32h / (34h + 5as) (h width, a heads, s sequence length).
double memory_after_b_from_model(int d_model, int n_heads, int seq_len);

}  // namespace conductor::sched
