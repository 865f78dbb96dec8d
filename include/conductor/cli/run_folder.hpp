#pragma once
// Run folders (run.output): what a previous run left in one, the refusal to write over it, and the write probe
// that finds an unwritable folder before any work is done. Every check here runs before anything is created.
#include <filesystem>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"

namespace conductor::cli {

// The results of a previous run found in `dir`: trace.h5, summary.json, metrics.jsonl, resolved.yaml, a trained
// policy's files (policy.pt, curve.csv, summary.csv, summary.txt), checkpoint files (vstage_*.h5) and, when
// `checkpoint_dir` is not empty, that checkpoint folder if it holds anything.
std::vector<std::string> previous_results(const std::filesystem::path& dir,
                                          const std::filesystem::path& checkpoint_dir = {});

// Throws InputError (exit 2) naming the folder, what it holds and how to proceed when the command would write
// over another run's results. Allowed: run.overwrite; `run` with checkpoint.resume set into the folder of the run
// it continues (its resolved.yaml is this deck but for run.steps, run.output, run.overwrite, run.log_every,
// run.memory_limit_gb and checkpoint.*),
// and with a checkpoint.path that holds nothing or is the resumed checkpoints' root; `simulate` into a folder that
// holds only its own files, written from this very deck (deterministic, so writing them again loses nothing; a
// measured run's folder is never its). `train-policy` never replaces a trained policy without run.overwrite, not
// even one of this very deck (its folder holds what a user keeps: policy.pt, maybe in use, curve.csv's wall times,
// summaries edited by hand).
void check_output_folder(const config::Deck& deck, config::Command command);
// A resume's checkpoint against this deck wherever it writes (the data stream continues, optim.* changes said):
// what check_output_folder checks of any resume; validate's for a run without --output-for.
void check_resume(const config::Deck& deck);

// A resume with run.overwrite=true into a folder holding another run's results (no resolved.yaml, or one that
// differs from this deck beyond what a resume may change): the run replaces its trace and metrics instead of
// continuing them, since steps of two configurations in one trace would be read as one run.
bool resume_replaces_results(const config::Deck& deck);

// What every command that writes a run folder checks first: check_output_folder, then run.output probed for
// writing (probe_writable).
void check_run_output(const config::Deck& deck, config::Command command);

// Creates and removes a probe file in `dir`, or in its nearest existing ancestor when `dir` does not exist yet,
// so nothing is left behind; throws InputError naming `key` and the reason when it cannot be written.
void probe_writable(const std::string& key, const std::filesystem::path& dir);

// The deepest file a command writes under `dir` (`deepest`, relative to it) fits the system's limits on a path
// and on one name in it (PATH_MAX, NAME_MAX); else InputError naming `key`, the length and the limit. Checked
// before anything is created: a too-long folder was found only by the checkpoint after training, or after the
// folder's first levels had been created.
void check_path_room(const std::string& key, const std::filesystem::path& dir, const std::filesystem::path& deepest);

// The deepest file a run writes under checkpoint.path (a step's partial folder and its largest vstage file).
std::filesystem::path deepest_checkpoint_file(const config::Deck& deck);

// Creates the run folder; InputError (exit 2) naming run.output when it cannot be.
void create_run_folder(const std::filesystem::path& dir);

// A folder holding earlier results (summary.json; this deck's, which simulate may rewrite, or any with
// run.overwrite) keeps them until the new run is complete: its files are written beside them (`NAME.new`) and
// renamed over them by commit(), so a rerun stopped halfway (discard()) leaves the earlier complete results as
// they were. Without earlier results every file is written in place.
class ResultFiles {
 public:
  ResultFiles(std::filesystem::path dir, std::vector<std::string> names);
  bool earlier() const { return earlier_; }
  std::filesystem::path path(const std::string& name) const;  // where this run writes `name` (one of names)
  // Each written file over its earlier one; an earlier file this run did not write (trace.enabled=false now) is
  // removed, since it is not this run's. Error naming both paths when a rename fails.
  void commit();
  void discard() const;  // this run's files removed, the earlier ones kept
  // Not committed (an error on the way: a full disk, a file-size limit): beside earlier results, what this run
  // wrote goes (a half-written trace.h5.new filled the disk); without them, the files stay as far as they got.
  ~ResultFiles();
  ResultFiles(const ResultFiles&) = delete;
  ResultFiles& operator=(const ResultFiles&) = delete;

 private:
  std::filesystem::path dir_;
  std::vector<std::string> names_;
  bool earlier_ = false;
  bool committed_ = false;
};

}  // namespace conductor::cli
