#include "conductor/runtime/checkpointing.hpp"

#include <csignal>
#include <sstream>

#include "collective.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/fault_injection.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/folder_lock.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

namespace {

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

// Every rank's text, concatenated in rank order, on rank 0 (under the watchdog, naming `what`).
std::string gather_to_root(const std::string& mine, MPI_Comm comm, const Watchdog& watchdog, const std::string& what) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  const int bytes = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(static_cast<std::size_t>(size));
  watched_gather(watchdog, &bytes, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm, what);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[static_cast<std::size_t>(r)] = total;
    total += counts[static_cast<std::size_t>(r)];
  }
  std::string all(rank_of(comm) == 0 ? static_cast<std::size_t>(total) : 0, '\0');
  watched_gatherv(watchdog, mine.data(), bytes, MPI_CHAR, all.data(), counts.data(), displs.data(), MPI_CHAR, 0, comm,
                  what);
  return all;
}

// "name 0xcrc bytes" per line: a rank's manifest entries on their way to rank 0.
std::string entries_text(const std::vector<model::CheckpointFile>& files) {
  std::ostringstream o;
  for (const auto& f : files) o << f.name << " " << util::crc32_hex(f.crc32) << " " << f.bytes << "\n";
  return o.str();
}

std::vector<model::CheckpointFile> parse_entries(const std::string& text) {
  std::vector<model::CheckpointFile> files;
  std::istringstream in(text);
  model::CheckpointFile f;
  std::string crc;
  while (in >> f.name >> crc >> f.bytes) {
    if (!util::parse_crc32_hex(crc, f.crc32)) throw Error("checkpoint: bad entry '" + f.name + " " + crc + "'");
    files.push_back(f);
  }
  return files;
}

// "a; b; c and 2 more": at most `most` differences.
std::string listed(const std::vector<std::string>& items, std::size_t most) {
  std::string out;
  for (std::size_t i = 0; i < items.size() && i < most; i++) out += (i ? "; " : "") + items[i];
  if (items.size() > most) out += " and " + std::to_string(items.size() - most) + " more";
  return out;
}

// The data files this run opened against the checkpoint's record of its run's: a resumed run continues the data
// stream only over the same tokens. A difference is refused (InputError) unless checkpoint.allow_data_change,
// which warns; a checkpoint without the record (written before it existed) resumes with a warning.
void check_resumed_data(const plan::Plan& plan, const model::Manifest& m, const std::string& step_dir,
                        const std::vector<model::DataFileIdentity>& now) {
  const std::string named = "checkpoint.resume = '" + step_dir + "'";
  if (!m.data_recorded) {
    if (!now.empty()) {
      log::warn(named + ": its manifest has no record of the data files (written by an older conductor), so this " +
                "run's data files are not compared with those the checkpoint's run read");
    }
    return;
  }
  const std::vector<std::string> differ = model::data_differences(m.data, now);
  if (differ.empty()) return;
  if (plan.checkpoint.allow_data_change) {
    log::warn(named + ": resuming on data files that differ from those the checkpoint's run read (" +
              listed(differ, 4) +
              "), as checkpoint.allow_data_change = true allows; the steps from here differ from an uninterrupted run");
    return;
  }
  throw InputError(named + ": the data files differ from those the checkpoint's run read: " + listed(differ, 4) +
                   "; the resumed run would train on other tokens than an uninterrupted one. Restore the files, or " +
                   "set checkpoint.allow_data_change=true to resume on the data as it is now");
}

}  // namespace

void probe_checkpoint_path(const plan::Plan& plan, MPI_Comm comm, const Watchdog& watchdog) {
  const int rank = rank_of(comm);
  collectively(comm, kExitUsage, watchdog, "every rank's probe of checkpoint.path", [&] {
    model::probe_checkpoint_root(plan.checkpoint.path, ".probe-rank" + std::to_string(rank));
    // One run writes a checkpoint root at a time: two jobs given the same checkpoint.path (a sweep's deck, a
    // requeued job beside a still-running attempt) would interleave their steps and `latest`. The command's
    // check refuses a root that already holds checkpoints; this lock also covers one that has none yet.
    if (rank == 0) lock_folder(plan.checkpoint.path, "checkpoint.path");
  });
}

Resumed resume_from_checkpoint(const plan::Plan& plan, model::StageModel* model, MPI_Comm comm,
                               const Watchdog& watchdog) {
  const std::string what = "every rank's load of checkpoint.resume";
  const int rank = rank_of(comm);
  std::string step_dir;
  // One rank follows `latest`, so every rank reads the same step even if `latest` moves meanwhile.
  collectively(comm, kExitUsage, watchdog, what, [&] {
    if (!model) throw InputError("checkpoint.resume needs a math backend (backend: cpu or cuda)");
    if (rank == 0) step_dir = model::resolve_checkpoint(plan.checkpoint.resume);
  });
  step_dir = watched_broadcast_text(watchdog, step_dir, comm, what);
  int step = -1;
  collectively(comm, kExitUsage, watchdog, what, [&] { step = model->load_checkpoint(step_dir); });
  int range[2] = {-step, step};
  int ranges[2] = {0, 0};
  watched_allreduce(watchdog, range, ranges, 2, MPI_INT, MPI_MAX, comm, what);
  range[0] = ranges[0], range[1] = ranges[1];
  collectively(comm, kExitUsage, watchdog, what, [&] {
    if (-range[0] != range[1]) {
      throw InputError("checkpoint.resume = '" + step_dir + "': the ranks loaded different steps (" +
                       std::to_string(-range[0]) + " to " + std::to_string(range[1]) + ")");
    }
    model::check_steps_left(step_dir, step, plan.run.steps);
  });
  // Every rank checked this manifest in load_checkpoint; its count of skipped steps is the run's so far. Rank 0
  // compares its record of the data files with the files this run opened (every rank opened the same ones).
  int skipped = 0;
  collectively(comm, kExitUsage, watchdog, what, [&] {
    const model::Manifest m = model::read_manifest(step_dir);
    skipped = m.skipped_nonfinite;
    if (rank == 0) check_resumed_data(plan, m, step_dir, model->data().files());
  });
  return Resumed{step, skipped};
}

void save_checkpoint_step(const plan::Plan& plan, const model::StageModel& model, int step, int skipped_nonfinite,
                          MPI_Comm comm, const Watchdog& watchdog) {
  const int rank = rank_of(comm);
  const std::string& root = plan.checkpoint.path;
  const std::string what = "every rank's part of checkpoint step " + std::to_string(step);
  try {
    collectively(comm, kExitFailure, watchdog, what, [&] {
      if (rank == 0) model::begin_step(root, step);
    });
    std::vector<model::CheckpointFile> mine;
    collectively(comm, kExitFailure, watchdog, what, [&] {
      mine = model.save_checkpoint(model::partial_folder(root, step), step);
      if (injected_failure(rank, step) == InjectedFailure::HangCheckpoint) std::raise(SIGSTOP);
    });
    const std::string all = gather_to_root(entries_text(mine), comm, watchdog, what);
    collectively(comm, kExitFailure, watchdog, what, [&] {
      if (rank != 0) return;
      model::Manifest m;
      m.step = step;
      m.pipeline = plan.pipeline.p;
      m.virtual_chunks = plan.pipeline.v;
      m.num_virtual_stages = model.num_virtual_stages();
      m.skipped_nonfinite = skipped_nonfinite;
      m.files = parse_entries(all);
      m.data_recorded = true;
      m.data = model.data().files();
      model::commit_step(root, m, plan.checkpoint.keep);
    });
  } catch (const CollectiveExit&) {
    if (rank == 0) model::abandon_step(root, step);  // the previous steps and `latest` were never touched
    throw;
  }
}

}  // namespace conductor::runtime
