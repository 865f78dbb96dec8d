#pragma once
// THE per-step figures, shared by the simulator, the runtime and (re-implemented, tested equal) analysis/.
// Definition (docs/shared design.md, "Time and units"; docs/trace.md):
//   compute ops   = events of kind F, B, W or BW (SEND/RECV never count as busy time)
//   makespan      = last compute-op end - first compute-op start, over all ranks, of this step
//   busy(r)       = sum of (end - start) of rank r's compute ops in this step
//   bubble_ratio  = 1 - sum_r busy(r) / (world_size * makespan)
//   lower_bound   = max_r busy(r)              (no schedule on this placement can be faster)
//   span(r)       = last compute-op end - first compute-op start of rank r in this step
//   stage_bubble_ratio = mean over the ranks with a compute op of 1 - busy(r) / span(r) (0 where span is 0):
//                   the Zero Bubble paper's per-stage bubble, which ignores the time before a rank's first op
//                   and after its last (a synchronous step pays those too: bubble_ratio counts them)
//   samples_per_s = samples / makespan         (makespan in seconds)
#include <vector>

#include "conductor/trace/event.hpp"

namespace conductor::trace {

// Busy time: an op of this rank (F, B, W, BW) or slices it computed for another rank (HELP_*: migration).
inline bool is_compute(EventKind kind) {
  return kind == EventKind::F || kind == EventKind::B || kind == EventKind::W || kind == EventKind::BW ||
         kind == EventKind::HELP_F || kind == EventKind::HELP_B || kind == EventKind::HELP_W ||
         kind == EventKind::HELP_BW;
}

// The per-stage bubble from per-rank busy time and span (same unit); span[r] < 0 marks a rank without a
// compute op, which is left out of the mean. 0 when no rank has an op.
double stage_bubble_ratio(const std::vector<double>& busy, const std::vector<double>& span);

// Summarizes the events whose .step equals `step` (others are ignored, so a whole run's events may be
// passed). The record's loss is NaN (the caller sets it where a loss exists). Throws conductor::Error when
// the step has no compute event, or an event's rank is outside [0, world_size).
StepRecord summarize_step(const std::vector<OpEvent>& events, int world_size, int step, double samples);

}  // namespace conductor::trace
