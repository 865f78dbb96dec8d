#include "conductor/util/checksum.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "conductor/util/error.hpp"
#include "conductor/util/fd.hpp"

namespace conductor::util {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error("cannot " + what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

std::uint32_t crc32(const void* data, std::size_t bytes, std::uint32_t previous) {
  return static_cast<std::uint32_t>(::crc32_z(previous, static_cast<const Bytef*>(data), bytes));
}

std::string crc32_hex(std::uint32_t crc) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", crc);
  return buf;
}

bool parse_crc32_hex(const std::string& text, std::uint32_t& crc) {
  if (text.size() != 10 || text.compare(0, 2, "0x") != 0) return false;
  unsigned long v = 0;
  for (std::size_t i = 2; i < text.size(); i++) {
    const char c = text[i];
    const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<unsigned long>(d);
  }
  crc = static_cast<std::uint32_t>(v);
  return true;
}

std::vector<unsigned char> read_file_bytes(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) fail("open", path);
  std::vector<unsigned char> bytes;
  unsigned char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("read", path);
    if (n == 0) break;
    bytes.insert(bytes.end(), buf, buf + n);
  }
  return bytes;
}

void write_file_durably(const std::string& path, const void* data, std::size_t bytes) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) fail("create", path);
  const auto* p = static_cast<const unsigned char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd.get(), p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("write", path);
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("fsync", path);
  if (::close(fd.release()) != 0) fail("close", path);  // NFS reports deferred write errors here
}

void fsync_folder(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) fail("open folder", path);
  if (::fsync(fd.get()) != 0 && errno != EINVAL) fail("fsync folder", path);  // EINVAL: fs without dir fsync
}

}  // namespace conductor::util
