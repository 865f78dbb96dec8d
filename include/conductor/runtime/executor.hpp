#pragma once
// One rank's readiness-driven execution of one training step. Receives for every cross-rank input of the
// step are posted up front; an arrival makes its op ready; whenever the rank can queue an op (fewer than
// Compute::queue_depth() launched and unfinished) it asks its per-rank driver (sched::RankDriver::next, the same
// code the simulator runs) what to run. In strict mode the arbiter returns the next op of the list or
// nothing; in readiness mode the best-ranked ready op within memory.
//
// Two planes. The data transport carries the tensors (MPI on host memory; NCCL or host-staged copies on GPU
// memory). The control transport (MPI, host) carries one 16-byte header per transfer:
// [int64 ready_at_ns on the common clock][int64 reserved], sent when the producing op has finished. The
// sender stamps ready_at = the op's end + the noise model's injected transfer delay; a receiver treats the
// input as arrived once both header and tensor are in, at max(arrival, ready_at), which is how delayed sends
// (congestion; emulated comm time) are injected without blocking the sender. Device transports let the
// tensor's send be queued behind its producer before the producer finishes; the host never waits on the GPU.
//
// Backfilling (readiness with hint backfill, sched/driver.hpp) adds one more 16-byte control message per
// transfer, the announcement, on tags above every header tag: [int64 expected_ns][int64 start_ns], sent when
// the producing op starts: expected = start + the op's estimate (the mean measured duration of the same kind and
// chunk on this rank in the previous step) + the transfer estimate (the cost model's comm time when it is
// injected, emulated; else 0). The consumer posts its receives with the headers' and drains them like the
// headers, so every announcement of a step is received within the step. In the first step nothing is measured:
// announcements say "unknown" and nothing is backfilled.
//
// Computation migration (ExecutorOptions::migration; docs/migration.md, "In the runtime") adds one 56-byte
// control message kind on one tag above the announcements, per pair of ranks, in order: a rank's status (Idle
// with its next op and the announced arrival of the input that op waits for; Busy; Finished: its
// step's ops are done and it sends nothing more this step) and help requests (owner's list position, slices,
// the slices' modelled time, bytes each way). The owner decides with the peers' last status
// (sched::RankDriver::offload, the simulator's decision), sends the request and a payload of the modelled size
// on the data transport; the helper sleeps the slices' time between its own ops and returns a payload of the
// modelled size; the owner's op ends when its own share and the reply are in. On the cpu backend the slices are
// real (the MLP column groups, Compute::SliceMoves::Real): the payload is the slices' inputs, sent from inside
// the owner's op once they exist; the helper computes them with the trainer's kernels between its own ops (never
// declining) and answers: W, BW with their weight gradients, which land in the owner's accumulators before the op
// completes; F, B per layer with a partial sum the owner waits for inside the op (serving requests meanwhile).
// migration.force replaces the decision with fixed patterns. An answer outstanding past the watchdog's limit ends the
// run naming the helper, the owner, the op and the step. Announcements are sent whenever migration is on (the cost
// model's estimate when not backfilling, as in the simulator). A step ends on a rank once its ops are done, every peer
// has said Finished and every help it was asked for is served.
//
// Sources: executor.cpp (the loop and the op lifecycle), control_plane.cpp (the transfers of a step: headers,
// announcements, arrivals), migration_peer.cpp (migration's messages, decision, help and answers).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <mpi.h>

#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/sched/driver.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::runtime {

class ControlPlane;

struct StepOutcome {
  std::vector<trace::OpEvent> events;  // this rank's compute ops (and transfers when recorded), common clock
  double peak_memory = 0.0;            // M_F
  int announcements = 0;               // announcements received that named an expected time (backfill)
  // Migration's control work on this rank, in CPU time (thread_cpu_ns: not the time descheduled on a loaded
  // node): decisions, the polls migration makes before a launch (MigrationPeer::catch_up; they also progress
  // payloads, so this is an upper bound), status and request messages posted and handled (not the payloads);
  // and the slices it gave away.
  std::int64_t migration_control_ns = 0;
  int slices_given = 0;
  int migration_decisions = 0;  // ops whose slices could move (decided or forced), moved or not
  int migration_statuses = 0;   // status messages sent (Idle, Busy, Finished; one per peer told)
  int migration_declined = 0;   // this rank's ops whose helper turned out busy (their slices stayed here)
};

struct ExecutorOptions {
  sched::Execution execution = sched::Execution::Strict;
  sched::Hint hint = sched::Hint::Schedule;
  double wide_spread = sched::kWideSpread;  // backfill ranks as critical from this measured spread on
  double memory_limit = 0.0;  // this rank's limit (M_F; sched::rank_memory_limits of the plan); <= 0: unlimited
  double memory_after_b = 0.0;
  bool comm_events = false;
  bool inject_full_comm_time = false;    // emulated: the whole transfer time is injected, not only its noise
  bool oversubscribed = false;           // more ranks than cores on this node: idle ranks sleep between polls
  double watchdog_s = 0.0;               // abort when no input arrives for this long with nothing to do (0: never)
  sched::Migration migration;            // this rank's computation migration (emulated, cpu); default off
  std::vector<plan::ForcedHelp> forced;  // migration.force: replaces the decision when not empty
};

// The options of this rank's driver for a step, from the executor's options, the noise it injects (what the
// simulator's drivers know of it: arrivals' spread, a late input's delay) and the previous step's measured op times
// (estimates and spread, where the simulator passes its cost model and noise).
sched::DriverOptions driver_options(const ExecutorOptions& options, const sim::NoiseModel& noise,
                                    const sched::MeasuredDurations& measured, bool migrating);

class Executor {
 public:
  // control: a host MPI transport on its own communicator; data: the tensor transport (may be the same kind,
  // but not the same communicator, so headers and tensors never match each other).
  Executor(int rank, Transport& control, Transport& data, Compute& compute, const CommonClock& clock,
           const sim::NoiseModel& noise, ExecutorOptions options);
  StepOutcome run_step(int step, const sched::Schedule& order);
  // The watchdog of the step's waits (inputs, helpers' answers), bounded by the steps so far (Watchdog).
  void bound_watchdog(double slowest_step_s, double factor) { watchdog_.bound_by_steps(slowest_step_s, factor); }
  // Called on every pass of the step's loop, between ops: optimizer post-validation polls the previous step's
  // check there while this step runs (runtime/training.cpp). Empty: nothing.
  void set_between_ops(std::function<void()> hook) { between_ops_ = std::move(hook); }

 private:
  class Step;  // one step's run (executor.cpp): the op lifecycle over a ControlPlane and a MigrationPeer
  double comm_estimate_ns() const;
  // What the rank waits for, for the watchdog's message: the outstanding input it needs first, and its sender
  // (-1 when none is outstanding).
  struct Awaited {
    std::string what;
    int peer = -1;
  };
  Awaited describe_wait(const sched::Schedule& order, const sched::Arbiter& state, const ControlPlane& plane,
                        int step) const;
  double injected_comm_ms(int step, const sched::Transfer& t) const;

  int rank_;
  Transport& control_;
  Transport& data_;
  Compute& compute_;
  const CommonClock& clock_;
  const sim::NoiseModel& noise_;
  ExecutorOptions options_;
  Watchdog watchdog_;
  // This rank's op durations in the previous step (backfill's estimates), their spread pooled over every step.
  sched::MeasuredDurations measured_;
  std::function<void()> between_ops_;
};

}  // namespace conductor::runtime
