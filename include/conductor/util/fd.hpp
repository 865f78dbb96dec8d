#pragma once
// A file descriptor with one owner, closed when the owner goes out of scope: on every path out, exceptions
// included. A close whose error matters (a written file: NFS reports deferred write errors there) takes the
// descriptor back with release() and checks its own ::close.
namespace conductor::util {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}  // what ::open returned: a negative one (a failed open) holds nothing
  ~Fd();
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept;  // closes the one it held
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  // The descriptor, no longer closed by this object (which then holds nothing).
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace conductor::util
