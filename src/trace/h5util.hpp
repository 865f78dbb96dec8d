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

inline hid_t check(hid_t id, const std::string& path, const char* call) {
  if (id < 0) fail(path, call);
  return id;
}
inline void check_status(herr_t status, const std::string& path, const char* call) {
  if (status < 0) fail(path, call);
}

}  // namespace conductor::trace::h5
