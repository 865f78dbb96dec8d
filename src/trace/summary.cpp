#include "conductor/trace/summary.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "conductor/util/error.hpp"

namespace conductor::trace {

double stage_bubble_ratio(const std::vector<double>& busy, const std::vector<double>& span) {
  double sum = 0.0;
  int ranks = 0;
  for (std::size_t r = 0; r < busy.size() && r < span.size(); ++r) {
    if (span[r] < 0) continue;
    sum += span[r] > 0 ? 1.0 - busy[r] / span[r] : 0.0;
    ++ranks;
  }
  return ranks > 0 ? sum / ranks : 0.0;
}

StepRecord summarize_step(const std::vector<OpEvent>& events, int world_size, int step, double samples) {
  if (world_size < 1) throw Error("summarize_step: world_size " + std::to_string(world_size) + " must be >= 1");
  std::vector<std::int64_t> busy(static_cast<std::size_t>(world_size), 0);
  std::int64_t first = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = std::numeric_limits<std::int64_t>::min();
  std::vector<std::int64_t> rank_first(busy.size(), first), rank_last(busy.size(), last);
  for (const OpEvent& ev : events) {
    if (ev.step != step || !is_compute(ev.kind)) continue;
    if (ev.rank < 0 || ev.rank >= world_size) {
      throw Error("summarize_step: step " + std::to_string(step) + " has an event on rank " + std::to_string(ev.rank) +
                  ", outside [0, " + std::to_string(world_size) + ")");
    }
    first = std::min(first, ev.start_ns);
    last = std::max(last, ev.end_ns);
    const auto r = static_cast<std::size_t>(ev.rank);
    busy[r] += ev.end_ns - ev.start_ns;
    rank_first[r] = std::min(rank_first[r], ev.start_ns);
    rank_last[r] = std::max(rank_last[r], ev.end_ns);
  }
  if (last == std::numeric_limits<std::int64_t>::min()) {
    throw Error("summarize_step: step " + std::to_string(step) + " has no compute event (F, B, W or BW)");
  }
  StepRecord rec;
  rec.step = step;
  rec.loss = std::numeric_limits<double>::quiet_NaN();
  rec.start_ns = first;
  rec.makespan_ns = last - first;
  double total = 0.0, largest = 0.0;
  for (std::int64_t b : busy) {
    total += static_cast<double>(b);
    largest = std::max(largest, static_cast<double>(b));
  }
  rec.lower_bound_ns = largest;
  std::vector<double> busy_d(busy.size()), span(busy.size(), -1.0);
  for (std::size_t r = 0; r < busy.size(); ++r) {
    busy_d[r] = static_cast<double>(busy[r]);
    if (rank_last[r] >= rank_first[r]) span[r] = static_cast<double>(rank_last[r] - rank_first[r]);
  }
  rec.stage_bubble_ratio = stage_bubble_ratio(busy_d, span);
  if (rec.makespan_ns > 0) {
    rec.bubble_ratio = 1.0 - total / (static_cast<double>(world_size) * static_cast<double>(rec.makespan_ns));
    rec.samples_per_s = samples / (static_cast<double>(rec.makespan_ns) * 1e-9);
  } else {  // only zero-length ops: nothing ran, so there is no idle time and no meaningful rate
    rec.bubble_ratio = 0.0;
    rec.samples_per_s = 0.0;
  }
  return rec;
}

}  // namespace conductor::trace
