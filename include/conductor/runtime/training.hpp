#pragma once
// `conductor run`: one MPI rank per pipeline stage trains the deck's model (or emulates it) for run.steps
// steps, each step executed by the readiness-driven executor under the order the global tier gives, and
// records every op in <run.output>/trace.h5 (rank 0 writes; flushed every step).
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <mpi.h>

#include "conductor/plan/plan.hpp"
#include "conductor/sched/planner.hpp"

namespace conductor::runtime {

struct RunOutcome {
  std::vector<double> losses;                        // per step (rank 0; NaN without math)
  std::vector<std::pair<int, double>> valid_losses;  // (step, validation loss) per evaluation (rank 0)
  int first_step = 0;                                // > 0 when resumed from a checkpoint
  int steps_done = 0;                                // steps completed by this run
  int stop_signal = 0;                               // SIGTERM/SIGINT that stopped the run early (0: ran to the end)
  bool nonfinite = false;  // stopped by a non-finite loss or gradient norm (numerics.hpp): a failure
  int rollbacks = 0;       // schedule.post_validation: optimistic updates undone (clipping or non-finite)
  int reruns = 0;          // schedule.post_validation: steps run again because such a rollback came while they ran
  // Computation migration on this rank over the run (StepOutcome's figures summed).
  std::int64_t migration_control_ns = 0;
  long slices_given = 0;
  long migration_decisions = 0;
  long migration_statuses = 0;
  long migration_declined = 0;
  std::string output_dir;
};

// Collective over comm, whose size must equal parallel.pipeline. make_planner (the same on every rank) builds
// the global tier's planner on rank 0, which replans every step (sched::PlanAhead, on a planner thread); empty:
// the generator's order every step, which only scheduler.kind static allows. Throws CollectiveExit after a
// collective failure (message already printed), Error/InputError on a local failure (the caller aborts the job).
RunOutcome train(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner = {});

}  // namespace conductor::runtime
