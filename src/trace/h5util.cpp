#include "h5util.hpp"

#include "conductor/util/error.hpp"

namespace conductor::trace::h5 {

namespace {
herr_t collect(unsigned n, const H5E_error2_t* err, void* client) {
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
}  // namespace

std::string last_error() {
  std::string out;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &out);
  return out.empty() ? std::string("no detail from HDF5") : out;
}

void fail(const std::string& path, const std::string& call) {
  std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw Error("trace " + path + ": " + call + " failed: " + detail);
}

void fail_input(const std::string& path, const std::string& call) {
  std::string detail = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw InputError("trace " + path + ": " + call + " failed: " + detail);
}

}  // namespace conductor::trace::h5
