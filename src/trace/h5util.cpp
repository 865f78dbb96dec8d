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

bool clear_killed_writers_mark(hid_t fapl) {
  hbool_t clear = 1;
  return H5Pexist(fapl, "clear_status_flags") > 0 && H5Pset(fapl, "clear_status_flags", &clear) >= 0;
}

Handle open_read_only(const std::string& path, hid_t fapl, std::string& plain_error) {
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl), H5Fclose);
  if (file.valid()) return file;
  plain_error = hdf5::innermost_error();
  H5Eclear2(H5E_DEFAULT);
  // Only for a file marked open: a SWMR reader retries every metadata read that fails its checksum, so a damaged
  // file opened that way takes minutes to fail.
  if (plain_error.find("already open for write") == std::string::npos) return file;
  file = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, fapl), H5Fclose);
  if (file.valid()) return file;
  H5Eclear2(H5E_DEFAULT);
  Handle past(H5Pcopy(fapl), H5Pclose);
  if (past.valid() && clear_killed_writers_mark(past.get()))
    file = Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, past.get()), H5Fclose);
  if (!file.valid()) H5Eclear2(H5E_DEFAULT);
  return file;
}

}  // namespace conductor::trace::h5
