#pragma once
// Small text outputs of a run folder (resolved.yaml, summary.json, summary.csv): written whole, or an Error naming
// the file. Checkpoints and traces have their own durable writers (checksum.hpp, trace/). And text inputs a deck
// names (schedule files), read whole after their checks.
#include <cstdint>
#include <filesystem>
#include <string>

namespace conductor {

// Writes `text` to PATH.tmp and renames it over `path`: a write that fails (a full disk, a file-size limit) throws
// naming `path` and leaves it as it was (or absent), never empty or cut short.
void write_text_file(const std::filesystem::path& path, const std::string& text);

// The whole text of `path`, the `what` a deck names (e.g. "schedule file"); InputError naming the file and why when
// it is missing, a folder, a device or socket (reading /dev/zero never ends), larger than `max_bytes` (read whole,
// it would take that much memory and more), or unreadable. A pipe is read (process substitution), up to max_bytes.
std::string read_text_input(const std::string& path, const std::string& what, std::uintmax_t max_bytes);

}  // namespace conductor
