#pragma once
// Checkpoints as atomic, verified steps (docs/design.md, "Checkpoints"). Layout under checkpoint.path:
//
//   <root>/step-000012/vstage_<vs>.h5     one HDF5 file per virtual stage (StageModel::save_checkpoint)
//   <root>/step-000012/manifest.txt       step, world shape, CRC-32 and size of every file: the commit mark; the
//                                         size and CRC-32 of every data file the run read (a resume compares them)
//   <root>/latest                         "step-000012": the newest complete step (replaced by rename)
//   <root>/.step-000014.partial/          a step being written; never read, removed on the next attempt
//
// A step is written into its .partial folder by every rank, the manifest is added only after every rank
// reported success, and the folder is renamed into place and `latest` replaced (write + rename + fsync of the
// folder) last: a failure at any point leaves the previous complete steps and `latest` untouched. The newest
// checkpoint.keep complete steps are kept.
#include <cstdint>
#include <string>
#include <vector>

#include "conductor/model/token_files.hpp"
#include "conductor/plan/plan.hpp"

namespace conductor::model {

class StageModel;

struct CheckpointFile {
  std::string name;  // file name inside the step folder, e.g. "vstage_1.h5"
  std::uint32_t crc32 = 0;
  std::uint64_t bytes = 0;
};

struct Manifest {
  int step = 0;  // steps done: training resumes at this step
  int pipeline = 1;
  int virtual_chunks = 1;
  int num_virtual_stages = 1;
  // Non-finite steps skipped before this step (optim.skip_nonfinite_steps counts a run, not an attempt); written
  // only when above 0, so older manifests read as 0.
  int skipped_nonfinite = 0;
  std::vector<CheckpointFile> files;
  // The data files the run read, as they were when it opened them (DataSource::files(); none for synthetic
  // data). A manifest written before they were recorded has no `data_files` line: data_recorded false.
  bool data_recorded = false;
  std::vector<DataFileIdentity> data;
};

inline constexpr const char* kManifestName = "manifest.txt";
inline constexpr const char* kLatestName = "latest";

std::string step_folder_name(int step);       // "step-000012"
int step_of_folder(const std::string& name);  // its inverse: 12 for "step-000012", -1 for any other name
std::string partial_folder(const std::string& root, int step);

// checkpoint.resume: a checkpoint root (its `latest` is followed) or a step folder (holds a manifest).
// Returns the step folder; InputError naming the path and what is missing otherwise.
std::string resolve_checkpoint(const std::string& path);
// The resolved deck (YAML text) the run that wrote <step_dir> recorded in it, read before any verification ("" when
// it cannot be read: the loader's checks then name the problem).
std::string checkpoint_deck(const std::string& step_dir);
// Parses <step_dir>/manifest.txt; InputError naming the file and the line for a missing or malformed one.
Manifest read_manifest(const std::string& step_dir);
// A resume from <step_dir>, at `step` steps done, has steps left under run.steps = `run_steps`; InputError ("nothing
// left to run") otherwise. conductor run checks it after loading (validate leaves it to the run: a finished run
// is no deck problem, and the job scripts tell the two apart).
void check_steps_left(const std::string& step_dir, int step, int run_steps);
// What conductor validate checks of the checkpoint a run would resume, before the run loads it: everything the
// loader checks of its files but their bytes (its manifest, the files it lists there with their sizes, each
// file's layer split, step, run.seed and dataset shapes against `plan` split into `num_virtual_stages`), without
// reading a weight; the CRC-32 of every byte, the data files it recorded and the steps left stay the run's
// checks. InputError with the loader's messages.
void check_checkpoint_fits(const plan::Plan& plan, int num_virtual_stages, const std::string& step_dir);
std::string manifest_text(const Manifest& m);
// One data file's line of the manifest, "data bytes N crc32 0xXXXXXXXX path PATH" (the path escaped: it may hold
// spaces, backslashes and newlines), and its reading; false where `line` is not such a line. The run's check that
// every rank reads rank 0's data files sends the same lines.
std::string data_file_line(const DataFileIdentity& d);
bool parse_data_file_line(const std::string& line, DataFileIdentity& d);
// The manifest's entry for `name`; InputError naming the manifest when it has none.
const CheckpointFile& manifest_entry(const Manifest& m, const std::string& step_dir, const std::string& name);
// The data files that differ between a checkpoint's record (`then`) and this run's (`now`), by path, one text
// each: "'PATH' has 4096 bytes now, 8192 then", "'PATH' has other contents (CRC-32 0x... now, 0x... then, the
// same 8192 bytes)", "'PATH' is no longer read (8192 bytes then)", "'PATH' is new (not read by the
// checkpoint's run)" (`then_reader` names who read `then`). Empty when they are the same.
std::vector<std::string> data_differences(const std::vector<DataFileIdentity>& then,
                                          const std::vector<DataFileIdentity>& now,
                                          const std::string& then_reader = "the checkpoint's run");

// checkpoint.path before training: creates it and writes/removes a probe file; InputError (exit 2) naming
// checkpoint.path and the system's reason when it cannot be written.
void probe_checkpoint_root(const std::string& root, const std::string& probe_name);
// A fresh, empty <root>/.step-NNNNNN.partial (a stale one from a failed attempt is removed first).
std::string begin_step(const std::string& root, int step);
// Writes the manifest into the partial folder, renames it to step-NNNNNN (replacing a stale one), points
// `latest` at it and removes complete steps beyond the newest `keep` (0: keep all). Every call is checked.
void commit_step(const std::string& root, const Manifest& manifest, int keep);
// Best effort after a failed write: removes the partial folder; never throws.
void abandon_step(const std::string& root, int step) noexcept;

// One process holding every virtual stage (the reference trainer, tests): begin, save, commit.
void write_checkpoint(const StageModel& model, const std::string& root, int step, int keep, int pipeline,
                      int virtual_chunks);

}  // namespace conductor::model
