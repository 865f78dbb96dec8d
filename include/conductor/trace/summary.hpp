#pragma once
// THE per-step figures, shared by the simulator, the runtime and (re-implemented, tested equal) analysis/.
// Definition (docs/shared design.md, "Time and units"; docs/trace.md):
//   compute ops   = events of kind F, B, W or BW (SEND/RECV never count as busy time)
//   makespan      = last compute-op end - first compute-op start, over all ranks, of this step
//   busy(r)       = sum of (end - start) of rank r's compute ops in this step
//   bubble_ratio  = 1 - sum_r busy(r) / (world_size * makespan)
//   lower_bound   = max_r busy(r)              (no schedule on this placement can be faster)
//   samples_per_s = samples / makespan         (makespan in seconds)
#include <vector>

#include "conductor/trace/event.hpp"

namespace conductor::trace {

inline bool is_compute(EventKind kind) {
  return kind == EventKind::F || kind == EventKind::B || kind == EventKind::W || kind == EventKind::BW;
}

// Summarizes the events whose .step equals `step` (others are ignored, so a whole run's events may be
// passed). The record's loss is NaN (the caller sets it where a loss exists). Throws conductor::Error when
// the step has no compute event, or an event's rank is outside [0, world_size).
StepRecord summarize_step(const std::vector<OpEvent>& events, int world_size, int step, double samples);

}  // namespace conductor::trace
