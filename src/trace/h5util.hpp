#pragma once
// Private to the trace layer: RAII over HDF5 ids, silencing HDF5's error-stack printing, and turning a
// failed HDF5 call into a conductor::Error that names the file and the call.
#include <hdf5.h>

#include <string>
#include <utility>

namespace conductor::trace::h5 {

// Owns one HDF5 id and closes it with the matching H5?close. Move-only.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, H5I_INVALID_HID)), closer_(other.closer_) {}
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      reset();
      id_ = std::exchange(other.id_, H5I_INVALID_HID);
      closer_ = other.closer_;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; returns the closer's status (negative on failure) so callers that care can report it.
  herr_t reset() {
    herr_t status = 0;
    if (id_ >= 0 && closer_ != nullptr) status = closer_(id_);
    id_ = H5I_INVALID_HID;
    return status;
  }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

// While alive, HDF5 does not print its error stack to stderr (we turn failures into our own messages).
class Silence {
 public:
  Silence() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~Silence() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  Silence(const Silence&) = delete;
  Silence& operator=(const Silence&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// The most specific message on HDF5's current error stack (e.g. "unable to open file: ... errno = 2").
std::string last_error();

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
