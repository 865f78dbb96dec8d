#include "conductor/util/folder_lock.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "conductor/util/error.hpp"

namespace conductor {

void lock_folder(const std::filesystem::path& dir, const std::string& key) {
  const std::string path = (dir / kFolderLockName).string();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw InputError(key + " = '" + dir.string() + "': cannot create its lock file " + kFolderLockName + " (" +
                     std::strerror(errno) + ")");
  }
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;  // the whole file
  if (::fcntl(fd, F_SETLK, &lock) != 0) {
    const int err = errno;
    struct flock holder {};
    holder.l_type = F_WRLCK;
    holder.l_whence = SEEK_SET;
    const bool known = ::fcntl(fd, F_GETLK, &holder) == 0 && holder.l_type != F_UNLCK;
    ::close(fd);
    if (err != EACCES && err != EAGAIN) {
      throw InputError(key + " = '" + dir.string() + "': cannot lock it (" + std::strerror(err) + ")");
    }
    throw InputError(key + " = '" + dir.string() + "' is being written by another conductor command now" +
                     (known ? " (process " + std::to_string(holder.l_pid) + ")" : std::string()) +
                     "; nothing was written. Wait for it to end, or choose another " + key +
                     (key == "run.output" ? " (or run.name)" : ""));
  }
  // Kept open to the end: a POSIX lock ends when its process closes any descriptor of the file.
  static std::mutex guard;
  static std::vector<int> held;
  const std::lock_guard<std::mutex> hold(guard);
  held.push_back(fd);
}

}  // namespace conductor
