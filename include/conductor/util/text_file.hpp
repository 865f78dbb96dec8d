#pragma once
// Small text outputs of a run folder (resolved.yaml, summary.json, summary.csv): written whole, or an Error naming
// the file. Checkpoints and traces have their own durable writers (checksum.hpp, trace/).
#include <filesystem>
#include <string>

namespace conductor {

void write_text_file(const std::filesystem::path& path, const std::string& text);

}  // namespace conductor
