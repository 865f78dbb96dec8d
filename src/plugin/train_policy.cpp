// `conductor train-policy DECK`, once cli has loaded the deck: PPO training of the global-tier policy in the
// simulator (policy/ppo.hpp). Part of the global tier's module (plugin/global_tier.hpp).
// Writes to run.output: resolved.yaml, policy.pt (the policy file), curve.csv (one row per iteration) and
// summary.csv / summary.txt (the trained policy against the deck's generator order, strict and readiness, under
// the deck's noise model). A run.output that already holds a trained policy is refused unless run.overwrite is set
// (cli/run_folder.hpp), even when that training was this very deck's.
// Every file is written under a temporary name (NAME.tmp beside it; curve.csv.tmp grows an iteration at a time)
// and the five are moved into place together once all are written, policy.pt last: a stop signal (SIGTERM,
// SIGINT: the binary's handlers, runtime/stop_signal.hpp), a write error or any other failure leaves run.output
// as it was, a previous run's files included, and removes the temporaries.
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "conductor/config/resolve.hpp"
#include "conductor/plugin/global_tier.hpp"
#include "conductor/policy/compare.hpp"
#include "conductor/policy/policy.hpp"
#include "conductor/policy/ppo.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/folder_lock.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/progress.hpp"
#include "conductor/util/text_file.hpp"

namespace conductor::plugin {

namespace {

namespace fs = std::filesystem;

// The files of one training under their temporary names, moved into place by commit(); until then the
// destructor removes every temporary this run created (never a folder or anything it did not write).
class StagedFiles {
 public:
  explicit StagedFiles(fs::path dir) : dir_(std::move(dir)) {}
  StagedFiles(const StagedFiles&) = delete;
  StagedFiles& operator=(const StagedFiles&) = delete;
  ~StagedFiles() {
    if (committed_) return;
    for (const auto& name : names_) {
      std::error_code ec;
      const fs::path tmp = temp(name);
      if (!fs::is_directory(fs::symlink_status(tmp, ec))) fs::remove(tmp, ec);
    }
  }

  // dir/NAME.tmp, registered for commit() (in order; the last registered is moved last).
  fs::path stage(const std::string& name) {
    names_.push_back(name);
    return temp(name);
  }
  fs::path temp(const std::string& name) const { return dir_ / (name + ".tmp"); }
  fs::path final_path(const std::string& name) const { return dir_ / name; }

  // Error naming the file when a destination cannot be replaced by a rename (a folder of that name).
  void check_destinations(const std::vector<std::string>& names) const {
    for (const auto& name : names) {
      std::error_code ec;
      const auto st = fs::symlink_status(final_path(name), ec);
      if (fs::is_directory(st)) {
        throw InputError("cannot write '" + final_path(name).string() +
                         "': a folder of that name is in run.output (train-policy writes a file there; move the "
                         "folder away or set another run.output)");
      }
    }
  }

  // Moves every temporary into place, in the order staged.
  void commit() {
    check_destinations(names_);
    for (const auto& name : names_) {
      std::error_code ec;
      fs::rename(temp(name), final_path(name), ec);
      if (ec) {
        throw Error("cannot move '" + temp(name).string() + "' to '" + final_path(name).string() +
                    "': " + ec.message());
      }
    }
    committed_ = true;
  }

 private:
  fs::path dir_;
  std::vector<std::string> names_;
  bool committed_ = false;
};

// A file written through stdio, for errno: every error names the file and why (a full disk, a size limit).
class OutFile {
 public:
  explicit OutFile(const fs::path& path) : path_(path.string()), f_(std::fopen(path_.c_str(), "w")) {
    if (!f_) fail();
  }
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  ~OutFile() {
    if (f_) std::fclose(f_);
  }
  // Written and flushed (so curve.csv.tmp can be followed while training runs).
  void write(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), f_) != text.size() || std::fflush(f_) != 0) fail();
  }
  void close() {
    std::FILE* f = f_;
    f_ = nullptr;
    if (std::fclose(f) != 0) fail();
  }

 private:
  [[noreturn]] void fail() const { throw Error("cannot write '" + path_ + "': " + std::strerror(errno)); }
  std::string path_;
  std::FILE* f_;
};

bool stop_requested() {
  const HostState& host = host_state();
  return host.stop_requested && host.stop_requested();
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    case SIGUSR2: return "SIGUSR2";
    default: return "a stop signal";
  }
}

// The one message of a stopped training; its exit status is kExitStopped, as `run`'s.
int stopped(const fs::path& out, const std::string& when) {
  const HostState& host = host_state();
  const int sig = host.stop_signal ? host.stop_signal() : 0;
  std::fprintf(stderr, "conductor: train-policy: interrupted by %s %s; nothing in %s was replaced\n",
               signal_name(sig).c_str(), when.c_str(), out.string().c_str());
  return kExitStopped;
}

// The command checked run.output before this module was loaded (cli/run_folder.hpp: a previous training's files
// are replaced only with run.overwrite); checked again under the folder's lock, as a training into the same folder
// may have finished in between.
void check_nothing_to_replace(const fs::path& out, const std::vector<std::string>& names) {
  std::string found;
  for (const auto& name : names) {
    std::error_code ec;
    if (fs::exists(fs::symlink_status(out / name, ec))) found += (found.empty() ? "" : ", ") + name;
  }
  if (found.empty()) return;
  throw InputError("run.output = '" + out.string() + "' already holds a trained policy (" + found +
                   "), which train-policy would replace; nothing was written. Choose another run.output (or "
                   "run.name), move those files away, or set run.overwrite=true to replace them");
}

}  // namespace

int train_policy(const config::Deck& deck) {
  const fs::path out = deck.run.output;
  const int iterations = deck.policy.iterations;
  if (stop_requested()) return stopped(out, "before training began");
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) throw Error("cannot create run.output '" + out.string() + "': " + ec.message());
  lock_folder(out, "run.output");  // one writer: two trainings into one folder would mix their files

  StagedFiles files(out);
  // policy.pt last: a folder whose policy.pt is this run's holds every other file of this run.
  const std::vector<std::string> names = {"resolved.yaml", "curve.csv", "summary.csv", "summary.txt", "policy.pt"};
  files.check_destinations(names);  // before the training: a folder named policy.pt would only fail at the end
  if (!deck.run.overwrite) check_nothing_to_replace(out, names);
  write_text_file(files.stage("resolved.yaml"), config::resolved_yaml(deck));

  const policy::TrainSetup setup = policy::setup_from_deck(deck);
  char line[512];
  std::snprintf(line, sizeof line,
                "train-policy: %s p=%d m=%d v=%d, %d iterations x %d episodes, noise levels [%.3g, %.3g], cost "
                "spread %.3g, heuristic %s, seed %llu",
                setup.base.name.c_str(), setup.base.p, setup.base.m, setup.base.v, iterations, deck.policy.episodes,
                deck.policy.noise_levels[0], deck.policy.noise_levels[1], deck.policy.cost_spread,
                deck.policy.heuristic.c_str(), deck.policy.seed);
  log::info(line);

  OutFile curve(files.stage("curve.csv"));
  curve.write(
      "iteration,decisions,sampled_makespan_ms,greedy_makespan_ms,heuristic_makespan_ms,policy_loss,"
      "value_loss,entropy,seconds\n");
  Progress progress("train-policy", "iterations", iterations);  // on stderr, at most once a second
  auto result = policy::train_ppo(
      setup,
      [&](const policy::IterationStats& s) {
        progress.update(s.iteration + 1);
        std::snprintf(line, sizeof line,
                      "iter %4d/%d  decisions %6d  makespan sampled %.4f greedy %.4f heuristic %.4f ms (greedy "
                      "%+.2f%%)  loss pi %+.4f v %.5f  entropy %.3f  %.1f s",
                      s.iteration + 1, iterations, s.decisions, s.sampled_makespan, s.greedy_makespan,
                      s.heuristic_makespan, 100.0 * (s.greedy_makespan / s.heuristic_makespan - 1.0), s.policy_loss,
                      s.value_loss, s.entropy, s.seconds);
        log::info(line);
        std::string row = std::to_string(s.iteration) + ',' + std::to_string(s.decisions);
        for (double v : {s.sampled_makespan, s.greedy_makespan, s.heuristic_makespan, s.policy_loss, s.value_loss,
                         s.entropy, s.seconds})
          row += ',' + format_double(v);
        curve.write(row + '\n');
      },
      stop_requested);
  const int done = static_cast<int>(result.curve.size());
  if (result.stopped || stop_requested()) {
    return stopped(out, "at iteration " + std::to_string(std::min(done + 1, iterations)) + " of " +
                            std::to_string(iterations) + " (" + std::to_string(done) + " done)");
  }
  curve.close();

  const auto rows = policy::compare_methods(config::resolve(deck), result.policy, deck.policy.eval_steps);
  if (stop_requested()) {
    return stopped(out, "while evaluating the trained policy (all " + std::to_string(iterations) + " iterations done)");
  }
  const std::string table = policy::format_table(rows);
  write_text_file(files.stage("summary.csv"), policy::to_csv(rows));
  write_text_file(files.stage("summary.txt"), table);
  // Its training deck's identity in its header, which a run it drives records in summary.json (`policy`):
  // resolved.yaml's deck but for where the files went (run.output, run.overwrite at their defaults), so the same
  // training into another folder writes the same policy file.
  config::Deck trained_on = deck;
  trained_on.run.output.clear();
  trained_on.run.overwrite = false;
  const std::string text = config::to_yaml(trained_on);
  result.policy.deck_crc32 = util::crc32_hex(util::crc32(text.data(), text.size()));
  policy::write_policy_file(result.policy, files.stage("policy.pt").string());
  files.commit();
  log::info("wrote " + (out / "policy.pt").string() + ", " + (out / "curve.csv").string() + ", summary.csv, " +
            "summary.txt and resolved.yaml");
  log::info("summary (" + std::to_string(deck.policy.eval_steps) + " simulated steps, the deck's noise):\n" + table);
  return 0;
}

}  // namespace conductor::plugin
