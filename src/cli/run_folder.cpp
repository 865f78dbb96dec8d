#include "conductor/cli/run_folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "conductor/config/deck_compare.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/run_report.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "conductor/trace/trace_writer.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/folder_lock.hpp"
#include "conductor/util/log.hpp"

namespace conductor::cli {

namespace fs = std::filesystem;

namespace {

// probe_writable's file, there for an instant: every rank probes checkpoint.path while rank 0 checks it.
constexpr std::string_view kWriteProbePrefix = ".conductor-write-probe-";

// Anything but a lock file (util/folder_lock.hpp: a run folder may also be the checkpoint folder) or another
// rank's (or job's) write probe: a probe seen at the wrong instant refused a run into an empty checkpoint.path.
bool holds_anything(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name != kFolderLockName && !name.starts_with(kWriteProbePrefix)) return true;
  }
  return false;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

}  // namespace

// Every file a command writes into run.output (files_written() says which command writes which).
constexpr const char* kRunFiles[] = {"trace.h5",  "summary.json", runtime::kMetricsFile, "resolved.yaml",
                                     "policy.pt", "curve.csv",    "summary.csv",         "summary.txt"};

std::vector<std::string> previous_results(const fs::path& dir, const fs::path& checkpoint_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const char* name : kRunFiles) {
      if (fs::exists(dir / name, ec)) found.emplace_back(name);
    }
    // Checkpoints: a step's files, or a checkpoint root (its `latest`, or a step folder with its manifest).
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      const bool step_file = name.rfind("vstage_", 0) == 0 && entry.path().extension() == ".h5";
      const bool root = (name == "latest" && entry.is_regular_file(ec)) ||
                        (name.rfind("step-", 0) == 0 && fs::exists(entry.path() / model::kManifestName, ec));
      if (step_file || root) {
        found.push_back("checkpoints (" + name + ", ...)");
        break;
      }
    }
  }
  if (!checkpoint_dir.empty() && holds_anything(checkpoint_dir))
    found.push_back("checkpoints in checkpoint.path '" + checkpoint_dir.string() + "'");
  return found;
}

namespace {

// The files a command may write again in run.output without run.overwrite: simulate's, from the same deck (the
// simulation is deterministic, so the same bytes), never in a folder that also holds another command's results (a
// measured run's trace). None for train-policy: its folder holds what a user keeps of a training (policy.pt, maybe
// already in use as scheduler.policy, curve.csv with its wall times, summaries and notes edited by hand), so
// training again there replaces them only with run.overwrite.
std::vector<std::string> files_written(config::Command command) {
  if (command == config::Command::Simulate) return {"trace.h5", "summary.json", "resolved.yaml"};
  return {};
}

// Keys a resumed run may change and still continue the run in its folder: how many steps, where the folder and
// the checkpoints are (a requeued job adds checkpoint.resume; a copied folder has another path).
// Keys that say where a run writes, how often it logs and what memory it may take, not what it computes: a resumed
// run may change them (a requeued job logs less often, or writes its checkpoints elsewhere).
const std::vector<std::string> kNotWhatIsComputed = {"run.output", "run.overwrite", "run.log_every",
                                                     "run.memory_limit_gb", "checkpoint"};
// And run.steps: a resume may run longer or shorter (its learning rate's decay is said when it follows run.steps).
const std::vector<std::string> kResumeMayChange = [] {
  std::vector<std::string> keys = kNotWhatIsComputed;
  keys.insert(keys.begin(), "run.steps");
  return keys;
}();
// Keys that say where and whether results go, not what they are: a rerun of the very same deck may differ in
// them (run.overwrite=true once, then without it; the folder named relative or absolute).
const std::vector<std::string> kNotTheResults = {"run.output", "run.overwrite"};

// The root a resume reads from: checkpoint.resume names the root or one of its step folders.
// A folder path as written, without a trailing '/' (whose filename() is empty).
fs::path folder(const std::string& written) {
  const fs::path p = fs::path(written).lexically_normal();
  return p.filename().empty() ? p.parent_path() : p;
}

fs::path resume_root(const fs::path& resume) {
  std::error_code ec;
  return fs::exists(resume / "latest", ec) || !fs::exists(resume / "manifest.txt", ec) ? resume : resume.parent_path();
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  const bool same = fs::equivalent(a, b, ec);
  return !ec && same;
}

std::string listed(const std::vector<std::string>& items, std::size_t most) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < most; ++i) s += (i ? "; " : "") + items[i];
  if (items.size() > most) s += "; and " + std::to_string(items.size() - most) + " more";
  return s;
}

// Resuming from an older step folder into its own root writes the steps after it again: the complete ones there
// (with a manifest) would be replaced, the finished model among them. Refused, naming them.
// The complete steps (with a manifest) in `root` after step folder `resume`'s step, in order; none when `resume` is
// the root itself (its latest, the newest complete step).
std::vector<int> later_steps(const fs::path& root, const fs::path& resume) {
  const int from = model::step_of_folder(resume.filename().string());
  std::vector<int> later;
  if (from < 0) return later;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int step = model::step_of_folder(entry.path().filename().string());
    if (step > from && fs::exists(entry.path() / model::kManifestName, ec)) later.push_back(step);
  }
  std::sort(later.begin(), later.end());
  return later;
}

std::string step_range(const std::vector<int>& steps) {
  return std::to_string(steps.front()) + (steps.size() > 1 ? " .. " + std::to_string(steps.back()) : std::string());
}

void check_later_steps(const fs::path& root, const fs::path& resume) {
  const std::vector<int> later = later_steps(root, resume);
  if (later.empty()) return;
  throw InputError("checkpoint.resume = '" + resume.string() + "' is step " +
                   std::to_string(model::step_of_folder(resume.filename().string())) +
                   ", but checkpoint.path holds later complete steps (" + step_range(later) +
                   ") that this run would write again; nothing was written. Resume from the root (its latest), "
                   "write to another checkpoint.path, or set run.overwrite=true to replace them");
}

// Continuing a run's trace from an older step drops its rows after that step and writes them again up to
// run.steps: refused when the run in the folder went on past run.steps (its resumed root holds later complete
// steps), whatever checkpoint.path is, as those rows would be lost. A killed attempt's rows past its newest
// checkpoint are what continuing from the root's latest drops, by design.
void check_later_results(const fs::path& dir, const fs::path& resume, int steps) {
  const std::vector<int> later = later_steps(resume_root(resume), resume);
  if (later.empty() || later.back() <= steps) return;
  throw InputError("checkpoint.resume = '" + resume.string() + "' is step " +
                   std::to_string(model::step_of_folder(resume.filename().string())) +
                   ", but the run in run.output = '" + dir.string() + "' went on to step " +
                   std::to_string(later.back()) + " (complete checkpoints " + step_range(later) +
                   "): continuing its trace to run.steps = " + std::to_string(steps) +
                   " would drop the rows of the steps after that; nothing was written. Resume "
                   "into a new run.output, raise run.steps, or set run.overwrite=true to replace them");
}

// The rows a run's trace and metrics in `dir` hold must meet its checkpoint: continuing from checkpoint step
// `resumed` (steps done) to run.steps = `steps` keeps each file's rows before it and writes the rest again. Refused
// when a file's rows end before that step (the steps between would be missing from it: a checkpoint copied from
// further on, or a trace moved away and back) or go on past run.steps (those rows would be dropped and not written
// again), whatever checkpoint.resume's root holds. A trace that cannot be read is left to the run's own check, which
// names what is wrong with it.
void check_recorded_steps(const fs::path& dir, const fs::path& resume, int resumed, int steps) {
  const auto check = [&](const std::string& file, const std::vector<long long>& rows) {
    const long long last = rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end()) + 1;
    const std::string named = "checkpoint.resume = '" + resume.string() + "' is step " + std::to_string(resumed);
    const std::string where = (dir / file).string();
    if (last < resumed) {
      throw InputError(named + ", but '" + where + "' " +
                       (rows.empty() ? std::string("holds no step") : "ends at step " + std::to_string(last)) +
                       ": continuing it would leave out the steps " + std::to_string(last + 1) + " .. " +
                       std::to_string(resumed) +
                       " (the checkpoint is from further on than this folder's run "
                       "went); nothing was written. Resume into a new run.output, or from a checkpoint of step " +
                       std::to_string(last) + " or earlier");
    }
    if (last > steps) {
      throw InputError(named + ", but the run in run.output = '" + dir.string() + "' went on to step " +
                       std::to_string(last) + " ('" + where +
                       "' holds its rows): continuing it to run.steps = " + std::to_string(steps) +
                       " would drop the rows of the steps after that; nothing was written. "
                       "Resume into a new run.output, raise run.steps, or set run.overwrite=true to replace them");
    }
  };
  if (resumed < 0) return;  // no checkpoint found there: the loader names what is missing
  std::error_code ec;
  if (fs::exists(dir / "trace.h5", ec)) {
    std::optional<std::vector<int>> rows;
    try {
      rows = trace::read_step_numbers((dir / "trace.h5").string());
    } catch (const InputError&) {
      // Not readable: refused as the run's TraceWriter refuses it, naming why (validate --output-for run too).
      trace::check_continuable((dir / "trace.h5").string());
    }
    if (rows) check("trace.h5", std::vector<long long>(rows->begin(), rows->end()));
  }
  if (fs::exists(dir / runtime::kMetricsFile, ec))
    check(runtime::kMetricsFile, runtime::metrics_steps(dir / runtime::kMetricsFile));
}

// checkpoint.resume's step folder, resolved once per check (a root's `latest` read once), or empty where it names
// no checkpoint: the loader then names what is missing, on every rank.
std::string resumed_step_dir(const config::Deck& deck) {
  if (deck.checkpoint.resume.empty()) return {};
  try {
    return model::resolve_checkpoint(folder(deck.checkpoint.resume).string());
  } catch (const InputError&) {
    return {};
  }
}

// The step a resumed step folder continues from (steps done), or -1 where there is none.
int step_of_dir(const std::string& step_dir) {
  return step_dir.empty() ? -1 : model::step_of_folder(fs::path(step_dir).filename().string());
}

// What a resume may not change of the run that wrote its checkpoint: the batches it reads (the data stream
// continues from the checkpoint's position only over the same data and batch shape; run.seed is checked by the
// loader). Optimizer settings may change, as in fine-tuning, with a warning: the steps after it differ from an
// uninterrupted run.
bool changes_stream(const std::string& difference) {
  for (const char* key : {"parallel.microbatches ", "parallel.microbatch_size ", "data."}) {
    if (difference.rfind(key, 0) == 0) return true;
  }
  return false;
}

// Migration's groups are part of the math (README's one exception): migration.enabled, and with it on its units
// and slices, set the order of addition, so changing them changes the bits of every step from the resume on. Its
// other keys (link, helpers, fractions) only move work.
bool changes_grouping(const std::string& difference, bool migrating, const std::vector<std::string>& units_here,
                      const std::string& theirs) {
  if (difference.rfind("migration.enabled ", 0) == 0) return true;
  if (!migrating) return false;
  if (difference.rfind("migration.units ", 0) == 0) {
    // The same units in another order are the same groups.
    std::vector<std::string> there, here = units_here;
    try {
      for (const auto& u : YAML::Load(theirs)["migration"]["units"]) there.push_back(u.as<std::string>());
    } catch (const YAML::Exception&) {
      return true;
    }
    std::sort(here.begin(), here.end());
    std::sort(there.begin(), there.end());
    return here != there;
  }
  return difference.rfind("migration.slices ", 0) == 0;
}

// Whether this deck's learning-rate decay horizon (optim.decay_steps, or run.steps where it is 0) is that of the
// checkpoint's deck `theirs` (false where that cannot be read from it).
bool same_decay_horizon(const config::Deck& deck, const std::string& theirs) {
  const auto horizon = [](long long decay_steps, long long steps) { return decay_steps > 0 ? decay_steps : steps; };
  try {
    const YAML::Node there = YAML::Load(theirs);
    return horizon(there["optim"]["decay_steps"].as<long long>(), there["run"]["steps"].as<long long>()) ==
           horizon(deck.optim.decay_steps, deck.run.steps);
  } catch (const YAML::Exception&) {
    return false;
  }
}

// The checkpoint a resume reads, against this run (its deck is in the checkpoint): into its own run.output the
// checkpoint must be that run's (else its trace and metrics would be spliced with another model's), and anywhere
// the data stream must continue. Any other change of optim.* (or of run.steps when the decay follows it) or of
// migration's groups is said.
void check_resumed_checkpoint(const config::Deck& deck, const std::string& step_dir, bool into_own_folder) {
  if (step_dir.empty()) return;  // the loader names what is missing, on every rank
  const std::string theirs = config::without_header(model::checkpoint_deck(step_dir));
  if (theirs.empty()) return;
  const std::string here = config::to_yaml(deck);
  const std::string named = "checkpoint.resume = '" + deck.checkpoint.resume + "'";
  // One comparison: run.steps may change, but it matters below when the learning rate decays over it.
  std::vector<std::string> differ, steps;
  for (std::string& d : config::deck_differences(here, theirs, kNotWhatIsComputed)) {
    (d.rfind("run.steps ", 0) == 0 ? steps : differ).push_back(std::move(d));
  }
  if (into_own_folder && !differ.empty()) {
    throw InputError(named + " was written by another run than the one in run.output = '" + deck.run.output +
                     "' (the checkpoint's deck differs: " + listed(differ, 8) +
                     "; here: this deck, there: the checkpoint's); continuing would splice two runs' traces and "
                     "metrics. Nothing was written. Resume into a new run.output, or from that run's own checkpoints");
  }
  // The learning rate decays over optim.decay_steps, or run.steps where that is 0 (config::resolve): a change of
  // either that keeps that horizon changes no step.
  const bool same_horizon = same_decay_horizon(deck, theirs);
  std::vector<std::string> stream, changed;
  for (const std::string& d : differ) {
    if (changes_stream(d)) stream.push_back(d);
    if (same_horizon && d.rfind("optim.decay_steps ", 0) == 0) continue;
    if (d.rfind("optim.", 0) == 0 || changes_grouping(d, deck.migration.enabled, deck.migration.units, theirs))
      changed.push_back(d);
  }
  if (!stream.empty()) {
    throw InputError(named + ": the data stream would not continue: " + listed(stream, 4) +
                     " (here: this deck, there: the checkpoint's run); keep them, or start a new run");
  }
  if (deck.optim.decay_steps == 0 && !same_horizon) {
    for (const std::string& d : steps) changed.push_back(d + " (optim.decay_steps = 0 decays over run.steps)");
  }
  // A checkpoint at or past run.steps is refused when it loads: no warning about a resume that will not run.
  if (!changed.empty() && !(step_of_dir(step_dir) >= deck.run.steps)) {
    log::warn(named + ": resuming with " + listed(changed, 4) +
              " (here: this deck, there: the checkpoint's run); the steps from here (their learning rate, update or "
              "migration's order of addition) differ from an uninterrupted run of either deck");
  }
}

// checkpoint.path may hold only the checkpoints a resumed run continues (its checkpoint.resume's root).
void check_checkpoint_folder(const config::Deck& deck) {
  const fs::path path(deck.checkpoint.path);
  if (path.empty() || !holds_anything(path)) return;
  std::error_code ec;
  // A resume from a folder that is not there (a pruned step) fails on every rank with the loader's message, which
  // names it; whose checkpoints checkpoint.path holds cannot be told from it.
  if (!deck.checkpoint.resume.empty() && !fs::exists(folder(deck.checkpoint.resume), ec)) return;
  if (!deck.checkpoint.resume.empty() && same_folder(path, resume_root(folder(deck.checkpoint.resume)))) {
    check_later_steps(path, folder(deck.checkpoint.resume));
    return;
  }
  if (model::step_of_folder(folder(path.string()).filename().string()) >= 0 &&
      fs::exists(path / model::kManifestName, ec)) {
    // A step folder: new steps go beside it, in its root.
    throw InputError(
        "checkpoint.path = '" + path.string() + "' is one step of a checkpoint root; checkpoint.path " +
        "names the root new steps go into ('" + resume_root(folder(path.string())).string() +
        "' to continue that run, with checkpoint.resume naming the step or the root); nothing was written");
  }
  throw InputError("checkpoint.path = '" + path.string() + "' already holds checkpoints of another run; nothing was " +
                   "written. Choose another checkpoint.path, resume from it (checkpoint.resume=" + path.string() +
                   " continues that run), move them away, or set run.overwrite=true to write among them");
}

}  // namespace

void check_output_folder(const config::Deck& deck, config::Command command) {
  const bool run = command == config::Command::Run, resume = run && !deck.checkpoint.resume.empty();
  const std::string step_dir = resume ? resumed_step_dir(deck) : std::string();
  if (deck.run.overwrite) {
    if (resume) check_resumed_checkpoint(deck, step_dir, false);
    return;
  }
  if (run) check_checkpoint_folder(deck);
  const fs::path dir(deck.run.output);
  const std::vector<std::string> found = previous_results(dir);
  if (found.empty()) {
    if (resume) check_resumed_checkpoint(deck, step_dir, false);
    return;
  }
  std::error_code ec;
  const bool has_deck = fs::exists(dir / "resolved.yaml", ec);
  const std::string there = has_deck ? config::without_header(read_text(dir / "resolved.yaml")) : "";
  if (resume) {
    // Continuing a stopped run in its own folder (a requeued job): the folder's deck must be this run's.
    const std::vector<std::string> differ =
        has_deck ? config::deck_differences(config::to_yaml(deck), there, kResumeMayChange)
                 : std::vector<std::string>{};
    if (has_deck && differ.empty()) {
      check_later_results(dir, folder(deck.checkpoint.resume), deck.run.steps);
      check_resumed_checkpoint(deck, step_dir, true);
      check_recorded_steps(dir, folder(deck.checkpoint.resume), step_of_dir(step_dir), deck.run.steps);
      return;
    }
    throw InputError(
        "run.output = '" + dir.string() + "' holds the results of " +
        (has_deck ? "another run (its resolved.yaml differs: " + listed(differ, 8) + ")"
                  : "a run without resolved.yaml, so not the one checkpoint.resume continues") +
        "; nothing was written. checkpoint.resume continues a run in its own folder; to resume into a new " +
        "trace, choose another run.output (or run.name), or set run.overwrite=true to replace those files");
  }
  const std::vector<std::string> mine = files_written(command);
  const bool only_mine = std::all_of(found.begin(), found.end(), [&](const std::string& f) {
    return std::find(mine.begin(), mine.end(), f) != mine.end();
  });
  if (only_mine && has_deck && config::deck_differences(config::to_yaml(deck), there, kNotTheResults).empty()) return;
  if (command == config::Command::TrainPolicy && std::find(found.begin(), found.end(), "policy.pt") != found.end()) {
    throw InputError("run.output = '" + dir.string() + "' already holds a trained policy (" + joined(found) +
                     "), which train-policy would replace; nothing was written. Choose another run.output (or " +
                     "run.name), move those files away, or set run.overwrite=true to replace them");
  }
  throw InputError("run.output = '" + dir.string() + "' already holds the results of another run (" + joined(found) +
                   "); nothing was written. Choose another run.output (or run.name), move those files away, or " +
                   "set run.overwrite=true to replace them" +
                   (run ? " (checkpoint.resume continues a stopped run in place)" : ""));
}

void check_resume(const config::Deck& deck) {
  if (!deck.checkpoint.resume.empty()) check_resumed_checkpoint(deck, resumed_step_dir(deck), false);
}

void probe_writable(const std::string& key, const fs::path& dir) {
  std::error_code ec;
  fs::path at = fs::absolute(dir, ec);
  while (!at.empty() && !fs::exists(at, ec) && at != at.root_path()) at = at.parent_path();
  if (!fs::is_directory(at, ec)) {
    throw InputError(key + " = '" + dir.string() + "': '" + at.string() + "' is not a folder, so the folder cannot " +
                     "be created there");
  }
  // A real write rather than access(2): root passes every permission check, but not a read-only mount.
  const fs::path probe = at / (std::string(kWriteProbePrefix) + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    throw InputError(key + " = '" + dir.string() + "': cannot write in '" + at.string() + "' (" + std::strerror(errno) +
                     "); choose a writable folder");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_path_room(const std::string& key, const fs::path& dir, const fs::path& deepest) {
  std::error_code ec;
  const fs::path base = fs::absolute(dir, ec);
  if (ec) {
    throw InputError(key + " = '" + dir.string() + "': cannot resolve it against the working directory (" +
                     ec.message() + ")");
  }
  const fs::path full = (base / deepest).lexically_normal();
  const std::string text = full.string();
  if (text.size() >= PATH_MAX) {
    throw InputError(key + " = '" + dir.string() + "': the files written there would have paths of " +
                     std::to_string(text.size()) + " characters (e.g. .../" + deepest.string() +
                     "), over the system's limit of " + std::to_string(PATH_MAX - 1) + "; choose a shorter folder");
  }
  for (const fs::path& part : full) {
    if (part.string().size() > NAME_MAX) {
      throw InputError(key + " = '" + dir.string() + "': the name '" + part.string().substr(0, 40) + "...' has " +
                       std::to_string(part.string().size()) + " characters, over the system's limit of " +
                       std::to_string(NAME_MAX) + " for one name in a path; choose a shorter one");
    }
  }
}

fs::path deepest_checkpoint_file(const config::Deck& deck) {
  // .step-NNNNNN.partial/vstage_K.h5 (or its manifest.txt), the steps at least six digits.
  const int stages = deck.parallel.pipeline * std::max(1, deck.parallel.virtual_chunks);
  const fs::path step = fs::path(model::partial_folder("", deck.run.steps)).filename();
  const std::string vstage = model::StageModel::checkpoint_file("", stages - 1);
  return step / (vstage.size() > std::string(model::kManifestName).size() ? vstage : model::kManifestName);
}

bool resume_replaces_results(const config::Deck& deck) {
  if (deck.checkpoint.resume.empty() || !deck.run.overwrite) return false;
  const fs::path dir(deck.run.output);
  if (previous_results(dir).empty()) return false;
  std::error_code ec;
  if (!fs::exists(dir / "resolved.yaml", ec)) return true;
  const std::string there = config::without_header(read_text(dir / "resolved.yaml"));
  return !config::deck_differences(config::to_yaml(deck), there, kResumeMayChange).empty();
}

void check_run_output(const config::Deck& deck, config::Command command) {
  // The longest name written there: metrics.jsonl's copy while a resume trims it.
  check_path_room("run.output", deck.run.output, std::string(runtime::kMetricsFile) + runtime::kResumeCopySuffix);
  check_output_folder(deck, command);
  probe_writable("run.output", deck.run.output);
  // A folder where the run writes a file fails only when that file is written: HDF5's raw dump for trace.h5, or
  // a whole run trained before summary.json cannot be written. Named first, with what to do.
  std::error_code ec;
  for (const char* name : kRunFiles) {
    const fs::path p = fs::path(deck.run.output) / name;
    if (fs::is_directory(p, ec)) {
      throw InputError("run.output = '" + deck.run.output + "' holds a folder named '" + name +
                       "', where the run writes that file; move it away or choose another run.output");
    }
  }
}

void create_run_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError("run.output = '" + dir.string() + "': cannot create the folder: " + ec.message());
  lock_folder(dir, "run.output");
}

ResultFiles::ResultFiles(fs::path dir, std::vector<std::string> names)
    : dir_(std::move(dir)), names_(std::move(names)) {
  std::error_code ec;
  earlier_ = fs::exists(dir_ / "summary.json", ec);
}

fs::path ResultFiles::path(const std::string& name) const { return dir_ / (earlier_ ? name + ".new" : name); }

ResultFiles::~ResultFiles() {
  if (earlier_ && !committed_) discard();
}

void ResultFiles::commit() {
  committed_ = true;
  if (!earlier_) return;
  std::error_code ec;
  for (const auto& name : names_) {
    if (!fs::exists(path(name), ec)) {
      fs::remove(dir_ / name, ec);
      continue;
    }
    fs::rename(path(name), dir_ / name, ec);
    if (ec) {
      throw Error("cannot rename '" + path(name).string() + "' over '" + (dir_ / name).string() + "': " + ec.message());
    }
  }
}

void ResultFiles::discard() const {
  std::error_code ec;
  for (const auto& name : names_) fs::remove(path(name), ec);
}

}  // namespace conductor::cli
