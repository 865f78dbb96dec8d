#include "conductor/cli/run_folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "conductor/config/deck_compare.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/util/error.hpp"

namespace conductor::cli {

namespace fs = std::filesystem;

namespace {

bool holds_anything(const fs::path& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && !fs::is_empty(dir, ec) && !ec;
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
constexpr const char* kRunFiles[] = {"trace.h5",  "summary.json", "metrics.jsonl", "resolved.yaml",
                                     "policy.pt", "curve.csv",    "summary.csv",   "summary.txt"};

std::vector<std::string> previous_results(const fs::path& dir, const fs::path& checkpoint_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const char* name : kRunFiles) {
      if (fs::exists(dir / name, ec)) found.emplace_back(name);
    }
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("vstage_", 0) == 0 && entry.path().extension() == ".h5") {
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

// The files each command writes in run.output; the same deck again may rewrite them (simulate and train-policy
// are deterministic), but not a folder that also holds another command's results (a measured run's trace).
std::vector<std::string> files_written(config::Command command) {
  if (command == config::Command::Simulate) return {"trace.h5", "summary.json", "resolved.yaml"};
  if (command == config::Command::TrainPolicy)
    return {"resolved.yaml", "policy.pt", "curve.csv", "summary.csv", "summary.txt"};
  return {};
}

// Keys a resumed run may change and still continue the run in its folder: how many steps, where the folder and
// the checkpoints are (a requeued job adds checkpoint.resume; a copied folder has another path).
const std::vector<std::string> kResumeMayChange = {"run.steps", "run.output", "run.overwrite", "checkpoint"};

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
void check_later_steps(const fs::path& root, const fs::path& resume) {
  const int from = model::step_of_folder(resume.filename().string());
  if (from < 0) return;  // the root: its latest, the newest complete step
  std::vector<int> later;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const int step = model::step_of_folder(entry.path().filename().string());
    if (step > from && fs::exists(entry.path() / model::kManifestName, ec)) later.push_back(step);
  }
  if (later.empty()) return;
  std::sort(later.begin(), later.end());
  throw InputError("checkpoint.resume = '" + resume.string() + "' is step " + std::to_string(from) +
                   ", but checkpoint.path holds later complete steps (" + std::to_string(later.front()) +
                   (later.size() > 1 ? " .. " + std::to_string(later.back()) : std::string()) +
                   ") that this run would write again; nothing was written. Resume from the root (its latest), "
                   "write to another checkpoint.path, or set run.overwrite=true to replace them");
}

// checkpoint.path may hold only the checkpoints a resumed run continues (its checkpoint.resume's root).
void check_checkpoint_folder(const config::Deck& deck) {
  const fs::path path(deck.checkpoint.path);
  if (path.empty() || !holds_anything(path)) return;
  if (!deck.checkpoint.resume.empty() && same_folder(path, resume_root(folder(deck.checkpoint.resume)))) {
    check_later_steps(path, folder(deck.checkpoint.resume));
    return;
  }
  throw InputError("checkpoint.path = '" + path.string() + "' already holds checkpoints of another run; nothing was " +
                   "written. Choose another checkpoint.path, resume from it (checkpoint.resume=" + path.string() +
                   " continues that run), move them away, or set run.overwrite=true to write among them");
}

}  // namespace

void check_output_folder(const config::Deck& deck, config::Command command) {
  if (deck.run.overwrite) return;
  const bool run = command == config::Command::Run, resume = run && !deck.checkpoint.resume.empty();
  if (run) check_checkpoint_folder(deck);
  const fs::path dir(deck.run.output);
  const std::vector<std::string> found = previous_results(dir);
  if (found.empty()) return;
  std::error_code ec;
  const bool has_deck = fs::exists(dir / "resolved.yaml", ec);
  const std::string there = has_deck ? config::without_header(read_text(dir / "resolved.yaml")) : "";
  if (resume) {
    // Continuing a stopped run in its own folder (a requeued job): the folder's deck must be this run's.
    const std::vector<std::string> differ =
        has_deck ? config::deck_differences(config::to_yaml(deck), there, kResumeMayChange)
                 : std::vector<std::string>{};
    if (has_deck && differ.empty()) return;
    throw InputError(
        "run.output = '" + dir.string() + "' holds the results of " +
        (has_deck ? "another run (its resolved.yaml differs: " + listed(differ, 3) + ")"
                  : "a run without resolved.yaml, so not the one checkpoint.resume continues") +
        "; nothing was written. checkpoint.resume continues a run in its own folder; to resume into a new " +
        "trace, choose another run.output (or run.name), or set run.overwrite=true to replace those files");
  }
  const std::vector<std::string> mine = files_written(command);
  const bool only_mine = std::all_of(found.begin(), found.end(), [&](const std::string& f) {
    return std::find(mine.begin(), mine.end(), f) != mine.end();
  });
  if (only_mine && has_deck && config::deck_differences(config::to_yaml(deck), there, {}).empty()) return;
  throw InputError("run.output = '" + dir.string() + "' already holds the results of another run (" + joined(found) +
                   "); nothing was written. Choose another run.output (or run.name), move those files away, or " +
                   "set run.overwrite=true to replace them" +
                   (run ? " (checkpoint.resume continues a stopped run in place)" : ""));
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
  const fs::path probe = at / (".conductor-write-probe-" + std::to_string(::getpid()));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    throw InputError(key + " = '" + dir.string() + "': cannot write in '" + at.string() + "' (" + std::strerror(errno) +
                     "); choose a writable folder");
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void check_run_output(const config::Deck& deck, config::Command command) {
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
}

}  // namespace conductor::cli
