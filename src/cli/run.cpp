#include <csignal>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/runtime/training.hpp"

namespace conductor::cli {

int cmd_run(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Run);
  const runtime::RunOutcome outcome = runtime::train(deck, MPI_COMM_WORLD, planner_factory(deck));
  // Stopped by SIGTERM/SIGINT after a completed step: everything is flushed, but the run did not finish.
  return outcome.stop_signal ? 128 + outcome.stop_signal : 0;
}

}  // namespace conductor::cli
