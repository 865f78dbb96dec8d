#pragma once
// The runtime's side of checkpoints (model/checkpoint.hpp has the layout): every call is collective (all ranks
// call it at the same point) and ends every rank together, with one message, when any rank fails.
#include <mpi.h>

#include "conductor/model/stage.hpp"
#include "conductor/plan/plan.hpp"
#include "conductor/runtime/watchdog.hpp"

namespace conductor::runtime {

// Before training: every rank creates checkpoint.path and writes a probe file there. Exit 2 on every rank
// naming checkpoint.path when it cannot, instead of finding out after the first step. The ranks agree under
// `watchdog` (a rank that never joins, stopped or hung in a file system, ends the run after its limit).
void probe_checkpoint_path(const plan::Plan& plan, MPI_Comm comm, const Watchdog& watchdog);

// checkpoint.resume: rank 0 resolves the step folder (following `latest`) once, every rank checks its files
// against the manifest and loads them, and all ranks must agree on the step, which must be below run.steps.
// Returns that step and the non-finite steps skipped before it (the manifest's); every failure is exit 2 on every
// rank before any step runs. model: nullptr when the backend has no model (an error then). Every agreement is
// under `watchdog`, as probe_checkpoint_path's.
struct Resumed {
  int step = 0;
  int skipped_nonfinite = 0;
};
Resumed resume_from_checkpoint(const plan::Plan& plan, model::StageModel* model, MPI_Comm comm,
                               const Watchdog& watchdog);

// Writes step `step` atomically: every rank writes its files into the step's partial folder, and rank 0 adds
// the manifest, renames the folder into place, moves `latest` and prunes to checkpoint.keep only after every
// rank succeeded. A failure (e.g. a full disk) removes the partial folder, leaves the previous steps intact and
// ends every rank with exit 1 and one message naming the file and step.
// skipped_nonfinite: the run's non-finite steps skipped so far, kept in the manifest for a resumed run. Its
// collectives are under `watchdog`: a rank stopped or hung while it writes ends the run after
// runtime.watchdog_s, naming the step, instead of leaving the others blocked.
void save_checkpoint_step(const plan::Plan& plan, const model::StageModel& model, int step, int skipped_nonfinite,
                          MPI_Comm comm, const Watchdog& watchdog);

}  // namespace conductor::runtime
