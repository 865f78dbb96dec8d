#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::cli {

namespace {

// Before anything is allocated or written, on every rank together: the run folder holds no other run's
// results and can be written (rank 0 writes it), and checkpoint.path can be written (every rank writes its own
// checkpoint files there), so neither is found unwritable only after training.
void check_folders(const config::Deck& deck) {
  std::string problem;
  try {
    if (mpi::world_rank() == 0) {
      check_output_folder(deck, config::Command::Run);
      probe_writable("run.output", deck.run.output);
    }
    if (!deck.checkpoint.path.empty()) probe_writable("checkpoint.path", deck.checkpoint.path);
  } catch (const InputError& e) {
    problem = e.what();
  }
  mpi::check_all(problem.empty(), problem, kExitUsage);
}

}  // namespace

int cmd_run(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Run);
  check_folders(deck);
  check_run_size(deck);
  const plan::Plan plan = config::resolve(deck);
  const runtime::RunOutcome outcome = runtime::train(plan, MPI_COMM_WORLD, planner_factory(plan));
  if (outcome.nonfinite) return kExitFailure;  // already reported: the step and the stage
  // Stopped by SIGTERM/SIGINT after a completed step: everything is flushed, but the run did not finish.
  return outcome.stop_signal ? kExitStopped : 0;
}

}  // namespace conductor::cli
