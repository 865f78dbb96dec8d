#pragma once
// Private to the trace layer: turning a failed HDF5 call into a conductor::Error that names the file and the
// call (the RAII pieces are util/hdf5.hpp's).
#include <string>

#include "conductor/util/hdf5.hpp"

namespace conductor::trace::h5 {

using Handle = hdf5::Handle;
using Silence = hdf5::Silence;
using hdf5::last_error;

// Throws conductor::Error("trace FILE: CALL failed: <HDF5's reason>").
[[noreturn]] void fail(const std::string& path, const std::string& call);
// Throws conductor::InputError with the same message shape (for files the user handed us).
[[noreturn]] void fail_input(const std::string& path, const std::string& call);

// A file a killed writer left marked open for writing, read past the mark as `h5clear -s` does, on `fapl`. The
// property is HDF5's own ("clear_status_flags", registered on every file-access list since 1.10, the one h5clear
// sets; not in the public headers); false where this HDF5 lacks it.
bool clear_killed_writers_mark(hid_t fapl);

// Opens `path` read-only on `fapl`: plainly; then, when a killed writer left it marked open, as a SWMR reader (a
// run killed while writing in SWMR mode) and else past the mark (a run killed while it reopened the file to continue
// it, before SWMR writing started: the plain mark a SWMR reader refuses too). An invalid handle when none opens;
// `plain_error` gets the plain open's HDF5 reason.
Handle open_read_only(const std::string& path, hid_t fapl, std::string& plain_error);

inline hid_t check(hid_t id, const std::string& path, const char* call) {
  if (id < 0) fail(path, call);
  return id;
}
inline void check_status(herr_t status, const std::string& path, const char* call) {
  if (status < 0) fail(path, call);
}

}  // namespace conductor::trace::h5
