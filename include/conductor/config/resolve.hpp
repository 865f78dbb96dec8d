#pragma once
// The deck, resolved once into the plan the lower layers run (plan/plan.hpp). Every derived default (costs from
// the model dimensions and bandwidth, memory_after_b, the schedule kind's memory limit per rank, the decay
// horizon, trace options, activation bytes) is computed here and nowhere below config.
#include "conductor/config/deck.hpp"
#include "conductor/plan/plan.hpp"

namespace conductor::config {

plan::Plan resolve(const Deck& deck);

// Pieces of resolve(), for the deck's own derived keys (finalize_sched writes them back for resolved.yaml).
double resolved_memory_after_b(const Deck& deck);
// schedule.memory_limit, or the kind's default; 0 for a file: schedule without one (its own peak then).
double resolved_memory_limit(const Deck& deck);
// Activation bytes of one microbatch crossing a stage boundary (fp32: microbatch_size * seq_len * d_model * 4).
double activation_bytes(const Deck& deck);
// Per-rank F, B, W from the model dimensions and cost.device_tflops. Per-layer FLOPs of a GPT layer for one
// microbatch of `tokens` tokens, width h, sequence s: matmuls 24*tokens*h^2 per pass, attention 4*tokens*s*h.
// F = mm + att, B = mm + 2 att, W = mm; the last rank also runs the LM head (2*tokens*h*vocab per pass).
// Times = FLOPs / (tflops * 1e12), in ms.
plan::Costs costs_from_model(const Deck& deck);

}  // namespace conductor::config
