#include "conductor/util/format.hpp"

#include <charconv>
#include <cmath>

namespace conductor {

std::string format_double(double v) {
  const double magnitude = std::fabs(v);
  const bool plain = magnitude == 0.0 || (magnitude >= 1e-5 && magnitude < 1e17);
  // Plain text of the range above needs at most 24 characters (0.0000xxxxxxxxxxxxxxxxx), scientific 24.
  char buf[64];
  const auto result =
      std::to_chars(buf, buf + sizeof buf, v, plain ? std::chars_format::fixed : std::chars_format::scientific);
  return std::string(buf, result.ptr);
}

}  // namespace conductor
