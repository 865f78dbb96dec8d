#include "conductor/util/format.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace conductor {

double parse_plain_decimal(const std::string& text) {
  // [+] digits [. digits] [e [+-] digits], or [+] . digits [e ...]
  std::size_t i = text.empty() || text[0] != '+' ? 0 : 1;
  const auto digits = [&] {
    const std::size_t from = i;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') ++i;
    return i - from;
  };
  std::size_t mantissa = digits();
  if (i < text.size() && text[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return -1.0;
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    if (i < text.size() && (text[i] == '+' || text[i] == '-')) ++i;
    if (digits() == 0) return -1.0;
  }
  if (i != text.size()) return -1.0;
  errno = 0;
  const double v = std::strtod(text.c_str(), nullptr);
  // ERANGE: past a double (inf), or below its least (a subnormal such as 1e-320 is kept; 1e-400 reads as 0,
  // which would mean something else, e.g. CONDUCTOR_INIT_TIMEOUT_S's "for ever").
  return errno == ERANGE && (v == 0 || std::isinf(v)) ? -1.0 : v;
}

std::string format_double(double v) {
  const double magnitude = std::fabs(v);
  const bool plain = magnitude == 0.0 || (magnitude >= 1e-5 && magnitude < 1e17);
  // Plain text of the range above needs at most 24 characters (0.0000xxxxxxxxxxxxxxxxx), scientific 24.
  char buf[64];
  const auto result =
      std::to_chars(buf, buf + sizeof buf, v, plain ? std::chars_format::fixed : std::chars_format::scientific);
  return std::string(buf, result.ptr);
}

std::string printable(const std::string& text, std::size_t max_chars) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (out.size() >= max_chars) return out + "...";
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
    }
  }
  return out;
}

std::size_t control_byte_at(const std::string& text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) return i;
  }
  return std::string::npos;
}

std::size_t utf8_error_at(const std::string& text) {
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= text.size();
    for (std::size_t k = 1; ok && k < len; ++k) ok = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
    if (!ok) return i;
    i += len;
  }
  return std::string::npos;
}

std::string quoted_path(const std::string& path) {
  const bool plain = control_byte_at(path) == std::string::npos && utf8_error_at(path) == std::string::npos;
  return "'" + (plain ? path : printable(path, 4 * path.size())) + "'";
}

std::string shown(const std::string& text) {
  const bool plain =
      text.size() <= 160 && control_byte_at(text) == std::string::npos && utf8_error_at(text) == std::string::npos;
  return plain ? text : printable(text, 160);
}

}  // namespace conductor
