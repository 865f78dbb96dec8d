#include <cstdio>
#include "conductor/cli/cli.hpp"
#include "conductor/cli/global_tier.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/training.hpp"

#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::cli {

namespace {

// Computation migration's control overhead (StepOutcome::migration_control_ns: decisions, the polls before a launch,
// control messages posted and handled), summed over the ranks (collective), per slice moved and per decision (an op
// whose slices could move), the status messages sent and the ops whose helper declined. Issue 15's goal: under 50 us
// per slice.
void report_migration(const runtime::RunOutcome& outcome) {
  const double mine[5] = {static_cast<double>(outcome.migration_control_ns), static_cast<double>(outcome.slices_given),
                          static_cast<double>(outcome.migration_decisions),
                          static_cast<double>(outcome.migration_statuses),
                          static_cast<double>(outcome.migration_declined)};
  double sum[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
  MPI_Reduce(mine, sum, 5, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  char line[360];
  std::snprintf(line, sizeof line,
                "migration: %.0f slices moved in %.0f decisions (%.0f declined by a busy helper), control %.2f us per "
                "slice, %.2f us per decision, %.0f status messages (CPU time of decisions, control messages and polls "
                "on every rank)",
                sum[1], sum[2], sum[4], sum[1] > 0 ? sum[0] / sum[1] * 1e-3 : 0.0,
                sum[2] > 0 ? sum[0] / sum[2] * 1e-3 : 0.0, sum[3]);
  log::info(line);
}

// Before anything is allocated or written, on every rank together: the run folder holds no other run's
// results and can be written (rank 0 writes it), and checkpoint.path can be written (every rank writes its own
// checkpoint files there), so neither is found unwritable only after training.
void check_folders(const config::Deck& deck) {
  std::string problem;
  try {
    if (mpi::world_rank() == 0) {
      check_run_output(deck, config::Command::Run);
    }
    if (!deck.checkpoint.path.empty()) {
      check_path_room("checkpoint.path", deck.checkpoint.path, deepest_checkpoint_file(deck));
      probe_writable("checkpoint.path", deck.checkpoint.path);
    }
  } catch (const InputError& e) {
    problem = e.what();
  }
  mpi::check_all(problem.empty(), problem, kExitUsage);
}

// How often and how many checkpoints, with none written (checkpoint.path empty): the run trains to its end and
// leaves no checkpoint while the deck said every N steps. A warning, not a refusal: the job scripts validate a
// train job's deck before they add its checkpoint.path.
void warn_no_checkpoint_path(const config::Deck& deck) {
  const config::CheckpointConfig unset{};
  if (!deck.checkpoint.path.empty() || mpi::world_rank() != 0) return;
  const bool every = deck.checkpoint.every != unset.every, keep = deck.checkpoint.keep != unset.keep;
  if (!every && !keep) return;
  log::warn(std::string(every ? "checkpoint.every = " + std::to_string(deck.checkpoint.every)
                              : "checkpoint.keep = " + std::to_string(deck.checkpoint.keep)) +
            " is set but checkpoint.path is empty: this run writes no checkpoint (set checkpoint.path, the folder "
            "its steps go into)");
}

}  // namespace

int cmd_run(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Run);
  check_folders(deck);
  check_run_size(deck);
  warn_no_checkpoint_path(deck);
  plan::Plan plan = config::resolve(deck);
  plan.run.replace_results = mpi::world_rank() == 0 && resume_replaces_results(deck);  // rank 0 writes the folder
  const runtime::RunOutcome outcome = runtime::train(plan, MPI_COMM_WORLD, planner_factory(plan));
  if (plan.migration.enabled) report_migration(outcome);
  if (outcome.nonfinite) return kExitFailure;  // already reported: the step and the stage
  // Stopped by SIGTERM/SIGINT after a completed step: everything is flushed, but the run did not finish.
  return outcome.stop_signal ? kExitStopped : 0;
}

}  // namespace conductor::cli
