#include "conductor/util/text_file.hpp"

#include <fstream>

#include "conductor/util/error.hpp"

namespace conductor {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

}  // namespace conductor
