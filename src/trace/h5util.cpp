#include "h5util.hpp"

#include <cerrno>
#include <cstring>

#include "conductor/util/error.hpp"

namespace conductor::trace::h5 {

void fail(const std::string& path, const std::string& call) {
  // A refused write (a full disk, a file-size limit) says just that, not HDF5's stack.
  const std::string os = hdf5::os_error();
  std::string detail = os.empty() ? last_error() : "cannot write: " + os;
  if (os == std::strerror(EFBIG)) detail += " (the process's file-size limit: ulimit -f)";
  H5Eclear2(H5E_DEFAULT);
  throw Error("trace " + path + ": " + call + " failed: " + detail);
}

void fail_input(const std::string& path, const std::string& call) {
  std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw InputError("trace " + path + ": " + call + " failed: " + detail);
}

}  // namespace conductor::trace::h5
