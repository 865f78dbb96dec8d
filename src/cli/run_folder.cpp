#include "conductor/cli/run_folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

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

std::vector<std::string> previous_results(const fs::path& dir, const fs::path& checkpoint_dir) {
  std::vector<std::string> found;
  std::error_code ec;
  if (fs::is_directory(dir, ec)) {
    for (const char* name : {"trace.h5", "summary.json", "metrics.jsonl", "resolved.yaml"}) {
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

void check_output_folder(const config::Deck& deck, config::Command command) {
  if (deck.run.overwrite) return;
  if (command == config::Command::Run && !deck.checkpoint.resume.empty()) return;  // continuing that run
  const fs::path dir(deck.run.output);
  const bool writes_checkpoints = command == config::Command::Run && !deck.checkpoint.path.empty();
  const std::vector<std::string> found = previous_results(dir, writes_checkpoints ? deck.checkpoint.path : "");
  if (found.empty()) return;
  if (command == config::Command::Simulate && fs::exists(dir / "resolved.yaml") &&
      config::without_header(read_text(dir / "resolved.yaml")) == config::to_yaml(deck))
    return;
  throw InputError("run.output = '" + dir.string() + "' already holds the results of another run (" + joined(found) +
                   "); nothing was written. Choose another run.output (or run.name), move those files away, or " +
                   "set run.overwrite=true to replace them" +
                   (command == config::Command::Run ? " (checkpoint.resume continues a stopped run in place)" : ""));
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

void create_run_folder(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw InputError("run.output = '" + dir.string() + "': cannot create the folder: " + ec.message());
}

}  // namespace conductor::cli
