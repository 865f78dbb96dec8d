#include "conductor/util/text_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "conductor/util/error.hpp"

namespace conductor {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

std::string read_text_input(const std::string& path, const std::string& what, std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  const std::string named = what + " '" + path + "'";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) throw InputError("cannot read " + named + ": no such file");
  if (fs::is_directory(status)) throw InputError(named + " is a folder; give the file");
  if (fs::is_character_file(status) || fs::is_block_file(status) || fs::is_socket(status))
    throw InputError(named + " is a device or socket, not a file");
  const std::string too_large = named + " holds more than " + std::to_string(max_bytes) + " bytes, the most a " + what +
                                " may hold (it is read whole)";
  if (fs::is_regular_file(status) && fs::file_size(path, ec) > max_bytes) throw InputError(too_large);
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + named + ": " + (errno ? std::strerror(errno) : "cannot open it"));
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > max_bytes) throw InputError(too_large);
  }
  return text;
}

}  // namespace conductor
