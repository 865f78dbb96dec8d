#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/runtime/training.hpp"
#include "conductor/util/error.hpp"

namespace conductor::cli {

int cmd_run(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Run);
  const runtime::RunOutcome outcome = runtime::train(deck, MPI_COMM_WORLD, planner_factory(deck));
  if (outcome.nonfinite) return kExitFailure;  // already reported: the step and the stage
  // Stopped by SIGTERM/SIGINT after a completed step: everything is flushed, but the run did not finish.
  return outcome.stop_signal ? kExitStopped : 0;
}

}  // namespace conductor::cli
