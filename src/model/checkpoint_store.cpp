// The step-folder layout of checkpoints: manifest, `latest`, partial folders, pruning (model/checkpoint.hpp).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "conductor/model/checkpoint.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/checksum.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestMagic = "conductor-checkpoint 1";

// A data file's path as the last field of a manifest line: a backslash and a newline escaped.
std::string escaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

bool unescape(const std::string& text, std::string& path) {
  path.clear();
  for (std::size_t i = 0; i < text.size(); i++) {
    if (text[i] != '\\') {
      path += text[i];
      continue;
    }
    if (++i == text.size()) return false;
    if (text[i] == 'n')
      path += '\n';
    else if (text[i] == '\\')
      path += '\\';
    else
      return false;
  }
  return true;
}

void write_text_durably(const fs::path& path, const std::string& text) {
  util::write_file_durably(path.string(), text.data(), text.size());
}

// Removes complete step folders older than the newest `keep` (by step number, counting `current`), and only
// those older than `current`: folders of later steps left by an abandoned run are replaced as the run gets
// there.
void prune(const fs::path& root, int current, int keep) {
  if (keep <= 0) return;
  std::vector<int> older;
  for (const auto& entry : fs::directory_iterator(root)) {
    const int s = step_of_folder(entry.path().filename().string());
    if (s >= 0 && s < current && entry.is_directory()) older.push_back(s);
  }
  std::sort(older.rbegin(), older.rend());
  for (std::size_t i = static_cast<std::size_t>(keep - 1); i < older.size(); i++) {
    std::error_code ec;
    fs::remove_all(root / step_folder_name(older[i]), ec);
    if (ec)
      throw Error("checkpoint: cannot remove old step folder '" + (root / step_folder_name(older[i])).string() +
                  "': " + ec.message());
  }
}

}  // namespace

int step_of_folder(const std::string& name) {
  int step = -1;
  char tail = 0;
  if (name.size() != 11 || std::sscanf(name.c_str(), "step-%d%c", &step, &tail) != 1) return -1;
  return step;
}

std::string step_folder_name(int step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step-%06d", step);
  return buf;
}

std::string partial_folder(const std::string& root, int step) {
  std::string name = ".";  // built by appends: GCC 12 warns (-Wrestrict, falsely) on "." + std::string
  name += step_folder_name(step);
  name += ".partial";
  return (fs::path(root) / name).string();
}

namespace {

// fs::status of `p`, a path under checkpoint.resume = `path`; InputError naming both and the system's reason where
// it cannot be looked up (a loop of links, a name too long, a folder that may not be searched), which the
// throwing fs calls reported as a raw "filesystem error" (exit 1 through MPI_Abort).
fs::file_status looked_up(const std::string& path, const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec && ec != std::errc::no_such_file_or_directory && ec != std::errc::not_a_directory)
    throw InputError("checkpoint.resume = '" + path + "': '" + p.string() + "' cannot be looked up (" + ec.message() +
                     ")");
  return st;
}

}  // namespace

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::is_regular_file(looked_up(path, p / kManifestName))) return path;
  const fs::path latest = p / kLatestName;
  if (fs::is_regular_file(looked_up(path, latest))) {
    std::ifstream in(latest);
    std::string name;
    in >> name;
    if (step_of_folder(name) < 0) {
      throw InputError("checkpoint.resume = '" + path + "': '" + latest.string() + "' holds '" + name +
                       "', not a step folder name like step-000012");
    }
    if (!fs::is_regular_file(looked_up(path, p / name / kManifestName))) {
      throw InputError("checkpoint.resume = '" + path + "': '" + latest.string() + "' points at '" + name +
                       "', which has no " + kManifestName + " (incomplete or removed step)");
    }
    return (p / name).string();
  }
  if (!fs::is_directory(looked_up(path, p))) {
    std::error_code ec;
    throw InputError("checkpoint.resume = '" + path + "': " +
                     (fs::exists(p, ec) ? "a file, not a folder: name a checkpoint root or one of its step folders"
                                        : "no such folder"));
  }
  throw InputError("checkpoint.resume = '" + path + "': neither a checkpoint root (no '" + latest.string() +
                   "') nor a step folder (no '" + (p / kManifestName).string() + "')");
}

std::string data_file_line(const DataFileIdentity& d) {
  return "data bytes " + std::to_string(d.bytes) + " crc32 " + util::crc32_hex(d.crc32) + " path " + escaped(d.path);
}

bool parse_data_file_line(const std::string& line, DataFileIdentity& d) {
  // "data bytes N crc32 0xXXXXXXXX path PATH": the path is the rest of the line (it may hold spaces).
  std::istringstream words(line);
  std::string key, bytes_word, crc_word, crc, path_word, rest;
  words >> key >> bytes_word >> d.bytes >> crc_word >> crc >> path_word;
  std::getline(words, rest);
  return words.eof() && key == "data" && bytes_word == "bytes" && crc_word == "crc32" && path_word == "path" &&
         util::parse_crc32_hex(crc, d.crc32) && rest.size() >= 2 && rest[0] == ' ' && unescape(rest.substr(1), d.path);
}

std::string manifest_text(const Manifest& m) {
  std::ostringstream o;
  o << kManifestMagic << "\n"
    << "step " << m.step << "\n"
    << "pipeline " << m.pipeline << "\n"
    << "virtual " << m.virtual_chunks << "\n"
    << "virtual_stages " << m.num_virtual_stages << "\n";
  if (m.skipped_nonfinite > 0) o << "skipped_nonfinite " << m.skipped_nonfinite << "\n";
  for (const auto& f : m.files)
    o << "file " << f.name << " crc32 " << util::crc32_hex(f.crc32) << " bytes " << f.bytes << "\n";
  if (m.data_recorded) {
    o << "data_files " << m.data.size() << "\n";
    for (const auto& d : m.data) o << data_file_line(d) << "\n";
  }
  return o.str();
}

void check_steps_left(const std::string& step_dir, int step, int run_steps) {
  if (step < run_steps) return;
  throw InputError("checkpoint.resume = '" + step_dir + "' is at step " + std::to_string(step) +
                   ", not below run.steps = " + std::to_string(run_steps) +
                   ": nothing left to run (raise run.steps to train further)");
}

Manifest read_manifest(const std::string& step_dir) {
  const std::string path = (fs::path(step_dir) / kManifestName).string();
  if (!fs::is_regular_file(path)) {
    throw InputError("checkpoint '" + step_dir + "' has no " + kManifestName +
                     " (an incomplete step, or not a conductor checkpoint)");
  }
  std::ifstream in(path);
  std::string line;
  int line_no = 0;
  auto bad = [&](const std::string& why) {
    return InputError("checkpoint manifest '" + path + "' line " + std::to_string(line_no) + ": " + why);
  };
  Manifest m;
  int seen = 0, data_files = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line_no == 1) {
      if (line != kManifestMagic) throw bad("expected '" + std::string(kManifestMagic) + "'");
      continue;
    }
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "file") {
      CheckpointFile f;
      std::string crc_word, crc, bytes_word;
      words >> f.name >> crc_word >> crc >> bytes_word >> f.bytes;
      if (!words || crc_word != "crc32" || bytes_word != "bytes" || !util::parse_crc32_hex(crc, f.crc32))
        throw bad("expected 'file NAME crc32 0xXXXXXXXX bytes N'");
      m.files.push_back(f);
      continue;
    }
    if (key == "data") {
      DataFileIdentity d;
      if (!parse_data_file_line(line, d)) throw bad("expected 'data bytes N crc32 0xXXXXXXXX path PATH'");
      m.data.push_back(d);
      continue;
    }
    int value = 0;
    words >> value;
    if (!words) throw bad("expected '" + key + " <integer>'");
    // Steps done count from 0, and the shape from 1: a negative step would resume before the first step.
    const bool count = key == "step" || key == "skipped_nonfinite" || key == "data_files";
    if (value < (count ? 0 : 1)) throw bad(key + " " + std::to_string(value) + " is below " + (count ? "0" : "1"));
    if (key == "step")
      m.step = value, seen |= 1;
    else if (key == "pipeline")
      m.pipeline = value, seen |= 2;
    else if (key == "virtual")
      m.virtual_chunks = value, seen |= 4;
    else if (key == "virtual_stages")
      m.num_virtual_stages = value, seen |= 8;
    else if (key == "skipped_nonfinite")
      m.skipped_nonfinite = value;
    else if (key == "data_files")
      data_files = value, m.data_recorded = true;
    else
      throw bad("unknown key '" + key + "'");
  }
  if (line_no == 0)
    throw InputError("checkpoint manifest '" + path + "' is empty (a step written by conductor starts with '" +
                     kManifestMagic + "')");
  if (seen != 15 || m.files.empty())
    throw InputError("checkpoint manifest '" + path +
                     "' is incomplete (needs step, pipeline, virtual, "
                     "virtual_stages and at least one file line)");
  // The shape's three numbers agree, and every virtual stage has its file: an edited or mixed-up manifest is refused
  // here rather than resumed on a shape it does not describe.
  if (static_cast<long long>(m.pipeline) * m.virtual_chunks != m.num_virtual_stages) {
    throw InputError("checkpoint manifest '" + path + "' is inconsistent: pipeline " + std::to_string(m.pipeline) +
                     " x virtual " + std::to_string(m.virtual_chunks) + " != virtual_stages " +
                     std::to_string(m.num_virtual_stages));
  }
  if (m.files.size() != static_cast<std::size_t>(m.num_virtual_stages)) {
    throw InputError("checkpoint manifest '" + path + "' lists " + std::to_string(m.files.size()) +
                     " file lines for virtual_stages " + std::to_string(m.num_virtual_stages) +
                     " (one file per virtual stage)");
  }
  if (static_cast<std::size_t>(data_files) != m.data.size() || (!m.data_recorded && !m.data.empty())) {
    throw InputError("checkpoint manifest '" + path + "' says data_files " + std::to_string(data_files) + " but has " +
                     std::to_string(m.data.size()) + " data lines");
  }
  return m;
}

const CheckpointFile& manifest_entry(const Manifest& m, const std::string& step_dir, const std::string& name) {
  for (const auto& f : m.files) {
    if (f.name == name) return f;
  }
  throw InputError("checkpoint '" + step_dir + "': " + kManifestName + " lists no file '" + name + "'");
}

std::vector<std::string> data_differences(const std::vector<DataFileIdentity>& then,
                                          const std::vector<DataFileIdentity>& now, const std::string& then_reader) {
  const auto find = [](const std::vector<DataFileIdentity>& in, const std::string& path) -> const DataFileIdentity* {
    for (const auto& d : in) {
      if (d.path == path) return &d;
    }
    return nullptr;
  };
  std::vector<std::string> out;
  for (const auto& n : now) {
    const DataFileIdentity* t = find(then, n.path);
    const std::string name = quoted_path(n.path);
    if (!t) {
      out.push_back(name + " is new (not read by " + then_reader + ")");
    } else if (t->bytes != n.bytes) {
      out.push_back(name + " has " + std::to_string(n.bytes) + " bytes now, " + std::to_string(t->bytes) + " then");
    } else if (t->crc32 != n.crc32) {
      out.push_back(name + " has other contents (CRC-32 " + util::crc32_hex(n.crc32) + " now, " +
                    util::crc32_hex(t->crc32) + " then, the same " + std::to_string(n.bytes) + " bytes)");
    }
  }
  for (const auto& t : then) {
    if (!find(now, t.path))
      out.push_back(quoted_path(t.path) + " is no longer read (" + std::to_string(t.bytes) + " bytes then)");
  }
  return out;
}

void probe_checkpoint_root(const std::string& root, const std::string& probe_name) {
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) throw InputError("checkpoint.path = '" + root + "': cannot create the folder: " + ec.message());
  const std::string probe = (fs::path(root) / probe_name).string();
  try {
    util::write_file_durably(probe, "probe", 5);
  } catch (const Error& e) {
    throw InputError("checkpoint.path = '" + root + "' is not writable: " + e.what());
  }
  fs::remove(probe, ec);
}

std::string begin_step(const std::string& root, int step) {
  const std::string dir = partial_folder(root, step);
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (!ec) fs::create_directories(dir, ec);
  if (ec) throw Error("checkpoint step " + std::to_string(step) + ": cannot create '" + dir + "': " + ec.message());
  return dir;
}

// Every write that can fail for room (the manifest, the new `latest`) comes before the step's folder is renamed
// into place: a full disk then leaves the step partial (abandoned) and `latest` where it was, never a complete
// step that `latest` does not name (a resume from the root wrote over it without a word).
void commit_step(const std::string& root, const Manifest& manifest, int keep) {
  const fs::path r(root);
  const std::string partial = partial_folder(root, manifest.step);
  const fs::path final_dir = r / step_folder_name(manifest.step);
  const std::string step = "checkpoint step " + std::to_string(manifest.step) + ": ";
  const fs::path latest_tmp = r / (std::string(kLatestName) + ".tmp");
  try {
    write_text_durably(fs::path(partial) / kManifestName, manifest_text(manifest));
    util::fsync_folder(partial);
    write_text_durably(latest_tmp, step_folder_name(manifest.step) + "\n");
  } catch (const Error& e) {
    throw Error(step + e.what());
  }
  std::error_code ec;
  if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // a stale step of an abandoned run
  if (!ec) fs::rename(partial, final_dir, ec);
  if (ec) throw Error(step + "cannot rename '" + partial + "' to '" + final_dir.string() + "': " + ec.message());
  util::fsync_folder(root);
  fs::rename(latest_tmp, r / kLatestName, ec);
  if (ec) throw Error(step + "cannot replace '" + (r / kLatestName).string() + "': " + ec.message());
  util::fsync_folder(root);
  prune(r, manifest.step, keep);
}

void abandon_step(const std::string& root, int step) noexcept {
  std::error_code ec;
  fs::remove_all(partial_folder(root, step), ec);
  fs::remove(fs::path(root) / (std::string(kLatestName) + ".tmp"), ec);  // a `latest` never moved into place
}

void write_checkpoint(const StageModel& model, const std::string& root, int step, int keep, int pipeline,
                      int virtual_chunks) {
  Manifest m;
  m.step = step;
  m.pipeline = pipeline;
  m.virtual_chunks = virtual_chunks;
  m.num_virtual_stages = model.num_virtual_stages();
  m.data_recorded = true;
  m.data = model.data().files();
  try {
    m.files = model.save_checkpoint(begin_step(root, step), step);
    commit_step(root, m, keep);
  } catch (...) {
    abandon_step(root, step);
    throw;
  }
}

}  // namespace conductor::model
