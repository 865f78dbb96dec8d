#pragma once
// The deck schema: every key a deck may hold, with its type, default (read from a default-constructed Deck),
// allowed values and documentation. Parsing, `conductor validate`, docs/deck.md and its test all read this
// one table. A layer adds its keys in its own schema_<layer>.cpp through the builder below.
#include <yaml-cpp/yaml.h>

#include <functional>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "conductor/config/deck.hpp"

namespace conductor::config {

struct Field {
  std::string path;       // "parallel.pipeline"
  std::string type_name;  // "integer", "number or list of numbers", ...
  std::string doc;
  std::vector<std::string> choices;   // allowed strings (empty: any)
  std::vector<std::string> prefixes;  // allowed string prefixes, e.g. "file:" (in addition to choices)
  std::optional<double> min, max;     // numeric range, checked per element
  // Parses node into the deck; returns "" or a problem ("expected an integer, got 'abc'").
  std::function<std::string(Deck&, const YAML::Node&, const Field&)> set;
  std::function<YAML::Node(const Deck&)> get;

  Field& range(std::optional<double> lo, std::optional<double> hi) {
    min = lo;
    max = hi;
    return *this;
  }
  Field& one_of(std::vector<std::string> allowed) {
    choices = std::move(allowed);
    return *this;
  }
  Field& or_prefix(std::string prefix) {
    prefixes.push_back(std::move(prefix));
    return *this;
  }
};

// The value codecs: scalars, and lists (a scalar is accepted where a list is, as a list of one).
namespace codec {
std::string parse(const YAML::Node& n, int& out);
std::string parse(const YAML::Node& n, long long& out);
std::string parse(const YAML::Node& n, unsigned long long& out);
std::string parse(const YAML::Node& n, double& out);
std::string parse(const YAML::Node& n, bool& out);
std::string parse(const YAML::Node& n, std::string& out);
std::string parse(const YAML::Node& n, std::vector<double>& out);
std::string parse(const YAML::Node& n, std::vector<int>& out);
std::string parse(const YAML::Node& n, std::vector<std::string>& out);
YAML::Node emit(int v);
YAML::Node emit(long long v);
YAML::Node emit(unsigned long long v);
YAML::Node emit(double v);
YAML::Node emit(bool v);
YAML::Node emit(const std::string& v);
YAML::Node emit(const std::vector<double>& v);
YAML::Node emit(const std::vector<int>& v);
YAML::Node emit(const std::vector<std::string>& v);
template <class T>
const char* type_name();
// Per-element checks shared by scalars and lists.
std::string allowed_range(const Field& f);  // "1 .. 1e9", ">= 0", "<= 1", or empty for a field without a range
std::string check_range(double v, const Field& f);
std::string check_choice(const std::string& v, const Field& f);
inline std::string check(const Field& f, double v) { return check_range(v, f); }
inline std::string check(const Field& f, int v) { return check_range(v, f); }
inline std::string check(const Field& f, long long v) { return check_range(static_cast<double>(v), f); }
inline std::string check(const Field& f, unsigned long long v) { return check_range(static_cast<double>(v), f); }
inline std::string check(const Field&, bool) { return ""; }
inline std::string check(const Field& f, const std::string& v) { return check_choice(v, f); }
template <class T>
std::string check(const Field& f, const std::vector<T>& v) {
  for (const auto& e : v) {
    if (auto p = check(f, e); !p.empty()) return p;
  }
  return "";
}
}  // namespace codec

// field<T>("section.key", [](Deck& d) -> T& { return d.section.key; }, "what it means")
template <class T, class Access>
Field field(std::string path, Access access, std::string doc) {
  Field f;
  f.path = std::move(path);
  f.type_name = codec::type_name<T>();
  f.doc = std::move(doc);
  f.get = [access](const Deck& d) { return codec::emit(static_cast<const T&>(access(const_cast<Deck&>(d)))); };
  f.set = [access](Deck& d, const YAML::Node& n, const Field& self) -> std::string {
    T value{};
    // A value that does not read (not a number, or past the type: '99999999999999999999') says the range too.
    if (auto p = codec::parse(n, value); !p.empty())
      return self.min || self.max ? p + " (allowed: " + codec::allowed_range(self) + ")" : p;
    if (auto p = codec::check(self, value); !p.empty()) return p;
    access(d) = std::move(value);
    return {};
  };
  return f;
}

// The whole schema, in documentation order. Built once.
const std::vector<Field>& schema();
const Field* find_field(const std::string& path);

// Per-layer contributions (each defined in its own schema_<layer>.cpp).
void add_core_fields(std::vector<Field>& fields);
void add_sched_fields(std::vector<Field>& fields);
void add_model_fields(std::vector<Field>& fields);
void add_policy_fields(std::vector<Field>& fields);
void add_migration_fields(std::vector<Field>& fields);

}  // namespace conductor::config
