#include "h5util.hpp"

#include "conductor/util/error.hpp"

namespace conductor::trace::h5 {

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
