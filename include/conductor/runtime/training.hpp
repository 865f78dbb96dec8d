#pragma once
// `conductor run`: one MPI rank per pipeline stage trains the deck's model (or emulates it) for run.steps
// steps, each step executed by the readiness-driven executor under the order the global tier gives, and
// records every op in <run.output>/trace.h5 (rank 0 writes; flushed every step).
#include <string>
#include <vector>

#include <mpi.h>

#include "conductor/config/deck.hpp"

namespace conductor::runtime {

struct RunOutcome {
  std::vector<double> losses;  // per step (rank 0; NaN without math)
  int first_step = 0;          // > 0 when resumed from a checkpoint
  int steps_done = 0;          // steps completed by this run
  int stop_signal = 0;         // SIGTERM/SIGINT that stopped the run early (0: ran to the end)
  std::string output_dir;
};

// Collective over comm, whose size must equal parallel.pipeline. Throws CollectiveExit after a collective
// failure (message already printed), Error/InputError on a local failure (the caller aborts the job).
RunOutcome train(const config::Deck& deck, MPI_Comm comm);

}  // namespace conductor::runtime
