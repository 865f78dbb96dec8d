#pragma once
// The validation loss (eval.every, eval.batches) computed through the pipeline between two steps: for each
// validation batch, each virtual stage in order runs StageModel::eval_forward on the rank that holds it and hands
// its activation to the holder of the next stage (MPI from host memory; a copy when that is the same rank). The
// last stage sums the batches' losses in batch order, as model::reference_eval_loss does, so the loss is
// bit-identical on every rank count and schedule.
#include <mpi.h>

#include "conductor/model/stage.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/sched/schedule.hpp"

namespace conductor::runtime {

// Collective over comm; every rank returns the loss. Waits are watched (runtime.watchdog_s).
double pipeline_eval_loss(model::StageModel& model, const sched::Schedule& order, int rank, MPI_Comm comm, int batches,
                          const Watchdog& watchdog);

}  // namespace conductor::runtime
