#include "conductor/util/text_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "conductor/util/error.hpp"
#include "conductor/util/fd.hpp"

namespace conductor {

void write_text_file(const std::filesystem::path& path, const std::string& text) {
  // A full disk left a run's summary.json empty (a resumed run's, the previous attempt's, lost with it).
  const std::filesystem::path tmp = path.string() + ".tmp";
  const auto fail = [&](int err) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw Error("cannot write '" + path.string() + "': " + std::strerror(err));
  };
  // stdio rather than a stream, for errno: the error says why (a full disk, a file-size limit).
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) fail(errno);
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size() && std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !written) fail(written ? errno : err);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(errno);
}

namespace {

// The rest of `fd` to its end, refused once it holds more than max_bytes (`too_large` says so).
std::string read_all(int fd, const std::string& named, std::uintmax_t max_bytes, const std::string& too_large) {
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw InputError("cannot read " + named + ": " + std::strerror(errno));
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) throw InputError(too_large);
  }
}

// A named pipe (or a shell's process substitution, /dev/fd/N): opening it for reading blocks until a writer
// opens it, so it is opened without blocking and given kPipeWaitMs for its first bytes; then read to its end.
constexpr int kPipeWaitMs = 10'000;

std::string read_pipe(const std::string& path, const std::string& named, std::uintmax_t max_bytes) {
  const util::Fd f(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (f.get() < 0) throw InputError("cannot read " + named + ": " + std::strerror(errno));
  pollfd pfd{f.get(), POLLIN, 0};
  int ready = 0;
  do {
    ready = ::poll(&pfd, 1, kPipeWaitMs);
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) {
    throw InputError(named + " is a named pipe and nothing was written to it within " +
                     std::to_string(kPipeWaitMs / 1000) + " s; give a file");
  }
  // Data or the writer's end: read on, blocking, to the end.
  ::fcntl(f.get(), F_SETFL, ::fcntl(f.get(), F_GETFL) & ~O_NONBLOCK);
  return read_all(f.get(), named, max_bytes,
                  named + " holds more than " + std::to_string(max_bytes) + " bytes, the most it may hold");
}

}  // namespace

std::string read_text_input(const std::string& path, const std::string& what, std::uintmax_t max_bytes) {
  namespace fs = std::filesystem;
  const std::string named = what + " '" + path + "'";
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (!fs::exists(status)) {
    // A relative path is read from where the command runs, not beside the deck that names it: said, with where.
    const std::string where = fs::path(path).is_relative()
                                  ? " (a relative path is read from the working directory '" +
                                        fs::current_path(ec).string() + "', not the deck's folder)"
                                  : "";
    throw InputError("cannot read " + named + ": no such file" + where);
  }
  if (fs::is_directory(status)) throw InputError(named + " is a folder; give the file");
  if (fs::is_character_file(status) || fs::is_block_file(status) || fs::is_socket(status))
    throw InputError(named + " is a device or socket, not a file");
  if (fs::is_fifo(status)) return read_pipe(path, named, max_bytes);
  const std::string too_large = named + " holds more than " + std::to_string(max_bytes) + " bytes, the most a " + what +
                                " may hold (it is read whole)";
  if (fs::is_regular_file(status) && fs::file_size(path, ec) > max_bytes) throw InputError(too_large);
  const util::Fd f(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (f.get() < 0) throw InputError("cannot read " + named + ": " + std::strerror(errno));
  return read_all(f.get(), named, max_bytes, too_large);
}

}  // namespace conductor
