#include <csignal>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/training.hpp"

namespace conductor::cli {

int cmd_run(const Invocation& inv) {
  const plan::Plan plan = config::resolve(load_deck(inv, config::Command::Run));
  const runtime::RunOutcome outcome = runtime::train(plan, MPI_COMM_WORLD, planner_factory(plan));
  // Stopped by SIGTERM/SIGINT after a completed step: everything is flushed, but the run did not finish.
  return outcome.stop_signal ? 128 + outcome.stop_signal : 0;
}

}  // namespace conductor::cli
