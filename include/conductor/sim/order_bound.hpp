#pragma once
// The order bound of one step: no execution order of the schedule's ops under the same draws (op times and
// transfer delays, which the noise model keys by op and transfer, not by when they run) finishes the step sooner.
// It answers "how much could any reordering still gain" for the readiness tiers; it is not a bound for
// computation migration, which moves work between ranks.
//
// From the step's dependency graph (F(s) -> F(s+1) and B(s+1) -> B(s) across stages with their transfer times,
// F -> B -> W within a stage) each op gets a head (the longest path to its start) and a tail (the longest path
// from its end to the step's end). Every rank is then a single machine with release dates and delivery times,
// whose classical bound is: for a set of its ops, the least head + their work + the least tail. The bound is the
// largest, over ranks, of that for all its ops and for its F and B ops alone (a W has no tail, so leaving the Ws
// out keeps the chain after the rank's last B), and the longest single path (head + op + tail). Memory limits and
// the list's order are left out, so the bound is loose, never wrong.
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/noise.hpp"

namespace conductor::sim {

// The order bound of step `step` (ms, from the step's first op start).
double order_bound_ms(const sched::Schedule& schedule, const NoiseModel& noise, int step);

}  // namespace conductor::sim
