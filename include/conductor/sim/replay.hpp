#pragma once
// Record and replay: a runtime trace holds, per rank and step, when each input arrived (RECV end), when each op
// started and ended. Feeding those events, in time order, into fresh per-rank drivers (sched::RankDriver) must
// reproduce every pick the runtime made: the proof that the MPI runtime and the simulator run the same decision
// code, whatever the clock.
//
// Conditions: the trace has transfer events (trace.comm_events: true), its ops ran one at a time per rank (host
// backends: cpu, emulated; a GPU queue launches ops before their recorded start), and the replay is given the
// order that ran at each step and the options the runtime used.
//
// RECV events name the receiving stage, microbatch and sending rank but not the payload. Where both the
// activation (from stage s-1) and the gradient (from stage s+1) of (s, mb) come from the same rank, causality
// tells them apart: the gradient needs F(s, mb), which needs the activation, so the activation arrives first.
//
// Backfilling (hint backfill) also decides on announcements (ANNOUNCE events: when the driver learned that an
// input is expected, and when) and on the runtime's estimates: give options[r].estimate the table the runtime
// had, sched::MeasuredDurations of rank r's ops in the previous step of the same trace. Every choice is made at
// the driver's latest event time (sched::RankDriver::latest), as in the runtime.
#include <string>
#include <vector>

#include "conductor/sched/driver.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::sim {

struct ReplayResult {
  bool same = true;     // every recorded start was the driver's choice at that moment
  int picks = 0;        // starts checked
  int reordered = 0;    // starts that were not the rank's next listed action (readiness at work)
  std::string message;  // the first divergence: step, rank, time, what the driver chose and what ran
};

// Replays one step of one trace. `events`: the step's events of every rank (other steps are ignored);
// `options[r]`: rank r's driver options as the runtime had them.
ReplayResult replay_step(const sched::Schedule& order, const std::vector<sched::DriverOptions>& options,
                         const std::vector<trace::OpEvent>& events, int step);

}  // namespace conductor::sim
