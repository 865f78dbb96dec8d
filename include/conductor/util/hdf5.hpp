#pragma once
// RAII over HDF5 ids and HDF5's error-stack printing, shared by the layers that write HDF5 files (trace,
// model checkpoints). Header-only: only layers that link HDF5 include it.
#include <hdf5.h>

#include <string>
#include <utility>

namespace conductor::hdf5 {

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
  // Forgets the id without closing it (it stays open until the process ends): for a file that must not be
  // flushed again, whose close would write metadata describing what a failed write never put on disk.
  void release() { id_ = H5I_INVALID_HID; }
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

// For the whole process: HDF5 prints nothing of its own (every failure becomes one of our messages). Also keeps
// its "infinite loop closing library" dump from the exit of a process that read a damaged file: that report is
// printed only while automatic error printing is on.
inline void never_print_errors() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// For the whole process, called before any other HDF5 call: HDF5 does not close what is still open when the
// process exits. Every file is closed by its handle before that; one left open is one whose close already failed
// (a write refused: a full disk, a file-size limit), and HDF5 1.10's second attempt from its exit handler
// crashed the process (SIGSEGV in H5F__close_cb) after the run had reported the failure.
inline void skip_teardown_at_exit() { H5dont_atexit(); }

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

namespace detail {
inline herr_t collect_error(unsigned, const H5E_error2_t* err, void* client) {
  auto* out = static_cast<std::string*>(client);
  // Walking upward, entry 0 is the innermost (most specific) error; keep it and the API-level one.
  if (err->desc != nullptr && err->desc[0] != '\0') {
    if (out->empty()) {
      *out = err->desc;
    } else if (out->find(err->desc) == std::string::npos) {
      *out = std::string(err->desc) + ": " + *out;
    }
  }
  return 0;
}
}  // namespace detail

// The most specific message on HDF5's current error stack (e.g. "unable to open file: ... errno = 2").
inline std::string last_error() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, detail::collect_error, &out);
  return out.empty() ? std::string("no detail from HDF5") : out;
}

// Only the innermost message of HDF5's current error stack (e.g. "incorrect metadata checksum after all read
// attempts"): what went wrong, without the calls it went wrong in.
inline std::string innermost_error() {
  std::string out;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned, const H5E_error2_t* err, void* client) -> herr_t {
        auto* text = static_cast<std::string*>(client);
        if (text->empty() && err->desc != nullptr) *text = err->desc;
        return 0;
      },
      &out);
  return out.empty() ? std::string("no detail from HDF5") : out;
}

// The operating system's reason when HDF5's current error stack carries one (its file driver reports a failed
// read or write as "... errno = 28, error message = 'No space left on device', buf = ..."), else "". That is
// the whole story of a full disk or a file-size limit; the rest of the stack is HDF5's internals and a dump of
// pointers and byte counts.
inline std::string os_error() {
  // The driver's "errno = ..." entry is the innermost one: it is where the write failed.
  const std::string desc = innermost_error();
  const std::string key = "error message = '";
  const auto at = desc.find(key);
  if (at == std::string::npos) return "";
  const auto end = desc.find('\'', at + key.size());
  return end == std::string::npos ? "" : desc.substr(at + key.size(), end - at - key.size());
}

}  // namespace conductor::hdf5
