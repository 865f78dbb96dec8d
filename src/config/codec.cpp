// Conversions between YAML nodes and the deck's C++ types, with messages that quote what the user wrote.
#include <cctype>
#include <cmath>
#include <limits>

#include "conductor/config/schema.hpp"
#include "conductor/config/suggest.hpp"
#include "conductor/util/format.hpp"

namespace conductor::config::codec {

namespace {
std::string shown(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + conductor::shown(n.Scalar()) + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

template <class Int>
std::string parse_integer(const YAML::Node& n, Int& out, const char* what) {
  if (!n.IsScalar()) return std::string("expected ") + what + ", got " + shown(n);
  const std::string& s = n.Scalar();
  try {
    size_t used = 0;
    if constexpr (std::is_unsigned_v<Int>) {
      // stoull skips leading blanks and wraps a sign: " -1" (quoted) became 18446744073709551615. Blanks before
      // the digits are read as the signed keys read them.
      const std::size_t at = s.find_first_not_of(" \t");
      if (at == std::string::npos || !(std::isdigit(static_cast<unsigned char>(s[at])) || s[at] == '+'))
        return std::string("expected ") + what + ", got '" + conductor::shown(s) + "'";
      unsigned long long v = std::stoull(s, &used, 10);
      if (used != s.size()) throw std::invalid_argument(s);
      out = static_cast<Int>(v);
    } else {
      long long v = std::stoll(s, &used, 10);
      if (used != s.size()) throw std::invalid_argument(s);
      if (v < std::numeric_limits<Int>::min() || v > std::numeric_limits<Int>::max()) throw std::out_of_range(s);
      out = static_cast<Int>(v);
    }
  } catch (const std::out_of_range&) {
    return std::string("'") + conductor::shown(s) + "' does not fit in " + what;
  } catch (const std::exception&) {
    return std::string("expected ") + what + ", got '" + conductor::shown(s) + "'";
  }
  return {};
}

template <class T>
std::string parse_list(const YAML::Node& n, std::vector<T>& out) {
  out.clear();
  if (n.IsScalar()) {
    T v{};
    if (auto p = parse(n, v); !p.empty()) return p;
    out.push_back(v);
    return {};
  }
  if (!n.IsSequence()) return std::string("expected ") + type_name<std::vector<T>>() + ", got " + shown(n);
  for (size_t i = 0; i < n.size(); ++i) {
    T v{};
    if (auto p = parse(n[i], v); !p.empty()) return "element " + std::to_string(i) + ": " + p;
    out.push_back(v);
  }
  if (out.empty()) return "expected at least one element, got an empty list";
  return {};
}

template <class T>
YAML::Node emit_list(const std::vector<T>& v) {
  YAML::Node n(YAML::NodeType::Sequence);
  for (const auto& e : v) n.push_back(emit(e));
  n.SetStyle(YAML::EmitterStyle::Flow);
  return n;
}
}  // namespace

template <>
const char* type_name<int>() {
  return "integer";
}
template <>
const char* type_name<long long>() {
  return "integer";
}
template <>
const char* type_name<unsigned long long>() {
  return "non-negative integer";
}
template <>
const char* type_name<double>() {
  return "number";
}
template <>
const char* type_name<bool>() {
  return "boolean";
}
template <>
const char* type_name<std::string>() {
  return "string";
}
template <>
const char* type_name<std::vector<double>>() {
  return "number or list of numbers";
}
template <>
const char* type_name<std::vector<int>>() {
  return "integer or list of integers";
}
template <>
const char* type_name<std::vector<std::string>>() {
  return "string or list of strings";
}

std::string parse(const YAML::Node& n, int& out) { return parse_integer(n, out, "an integer"); }
std::string parse(const YAML::Node& n, long long& out) { return parse_integer(n, out, "an integer"); }
std::string parse(const YAML::Node& n, unsigned long long& out) {
  return parse_integer(n, out, "a non-negative integer");
}

std::string parse(const YAML::Node& n, double& out) {
  if (!n.IsScalar()) return "expected a number, got " + shown(n);
  const std::string& s = n.Scalar();
  // Decimal only, as integers are (strtod also reads hexadecimal: 0x10 was 16 here and refused as run.steps).
  if (s.find_first_of("xX") != std::string::npos) return "expected a decimal number, got '" + conductor::shown(s) + "'";
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used != s.size() || !std::isfinite(v)) throw std::invalid_argument(s);
    out = v;
  } catch (const std::out_of_range&) {  // well formed, but no double holds it: say so, not "not a number"
    return "'" + conductor::shown(s) + "' is beyond what a double holds (magnitudes 2.2e-308 .. 1.8e+308, or 0)";
  } catch (const std::exception&) {
    return "expected a number, got '" + conductor::shown(s) + "'";
  }
  return {};
}

std::string parse(const YAML::Node& n, bool& out) {
  if (!n.IsScalar()) return "expected true or false, got " + shown(n);
  const std::string& s = n.Scalar();
  // YAML 1.2's three spellings of each, and YAML 1.1's yes/no and on/off.
  if (s == "true" || s == "True" || s == "TRUE" || s == "yes" || s == "on") {
    out = true;
  } else if (s == "false" || s == "False" || s == "FALSE" || s == "no" || s == "off") {
    out = false;
  } else {
    return "expected true or false (also True, TRUE, yes, on; False, FALSE, no, off), got '" + conductor::shown(s) +
           "'";
  }
  return {};
}

std::string parse(const YAML::Node& n, std::string& out) {
  // `key:` in a deck and `key=` on the command line: the empty string, which string keys document (run.output
  // "" = the default folder, checkpoint.path "" = none).
  if (n.IsNull()) {
    out.clear();
    return {};
  }
  if (!n.IsScalar()) return "expected a string, got " + shown(n);
  out = n.Scalar();
  return {};
}

std::string parse(const YAML::Node& n, std::vector<double>& out) { return parse_list(n, out); }
std::string parse(const YAML::Node& n, std::vector<int>& out) { return parse_list(n, out); }
std::string parse(const YAML::Node& n, std::vector<std::string>& out) { return parse_list(n, out); }

YAML::Node emit(int v) { return YAML::Node(v); }
YAML::Node emit(long long v) { return YAML::Node(v); }
YAML::Node emit(unsigned long long v) { return YAML::Node(v); }
YAML::Node emit(double v) { return YAML::Node(format_double(v)); }
YAML::Node emit(bool v) { return YAML::Node(v); }
YAML::Node emit(const std::string& v) { return YAML::Node(v); }
YAML::Node emit(const std::vector<double>& v) { return emit_list(v); }
YAML::Node emit(const std::vector<int>& v) { return emit_list(v); }
YAML::Node emit(const std::vector<std::string>& v) { return emit_list(v); }

std::string allowed_range(const Field& f) {
  if (f.min && f.max) return format_double(*f.min) + " .. " + format_double(*f.max);
  if (f.min) return ">= " + format_double(*f.min);
  if (f.max) return "<= " + format_double(*f.max);
  return {};
}

std::string check_range(double v, const Field& f) {
  if (!(f.min && v < *f.min) && !(f.max && v > *f.max)) return {};
  return "value " + format_double(v) + " is out of range (allowed: " + allowed_range(f) + ")";
}

std::string check_choice(const std::string& v, const Field& f) {
  if (f.choices.empty() && f.prefixes.empty()) return {};
  for (const auto& c : f.choices) {
    if (v == c) return {};
  }
  for (const auto& p : f.prefixes) {
    if (v.size() > p.size() && v.compare(0, p.size(), p) == 0) return {};
  }
  std::string allowed;
  for (const auto& c : f.choices) allowed += (allowed.empty() ? "" : ", ") + c;
  for (const auto& p : f.prefixes) allowed += (allowed.empty() ? "" : ", ") + p + "...";
  std::string near = closest(v, f.choices);
  return "value '" + conductor::shown(v) + "' is not allowed (allowed: " + allowed + ")" +
         (near.empty() ? "" : "; did you mean '" + near + "'?");
}

}  // namespace conductor::config::codec
