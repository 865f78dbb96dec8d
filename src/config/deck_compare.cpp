#include "conductor/config/deck_compare.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>

namespace conductor::config {

namespace {

std::string shown(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "(none)";
  YAML::Emitter out;
  out << YAML::Flow << node;
  return out.c_str();
}

bool ignored_key(const std::string& key, const std::vector<std::string>& ignored) {
  return std::any_of(ignored.begin(), ignored.end(),
                     [&](const std::string& prefix) { return key == prefix || key.rfind(prefix + ".", 0) == 0; });
}

// Mappings key by key (keys of either side); anything else compared as its flow-style text.
void compare(const YAML::Node& here, const YAML::Node& there, const std::string& prefix,
             const std::vector<std::string>& ignored, std::vector<std::string>& out) {
  if (here.IsMap() && there.IsMap()) {
    std::vector<std::string> keys;
    for (const auto& side : {here, there}) {
      for (auto it = side.begin(); it != side.end(); ++it) {
        const std::string k = it->first.as<std::string>();
        if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
      }
    }
    for (const std::string& k : keys) {
      const std::string key = prefix.empty() ? k : prefix + "." + k;
      if (!ignored_key(key, ignored)) compare(here[k], there[k], key, ignored, out);
    }
    return;
  }
  const std::string a = shown(here), b = shown(there);
  if (a != b) out.push_back(prefix + " = " + a + " here, " + b + " there");
}

}  // namespace

std::vector<std::string> deck_differences(const std::string& here, const std::string& there,
                                          const std::vector<std::string>& ignored) {
  YAML::Node a, b;
  try {
    a = YAML::Load(here);
    b = YAML::Load(there);
  } catch (const YAML::Exception&) {
    return {"the deck there is not readable YAML"};
  }
  if (!a.IsMap() || !b.IsMap()) return {"the deck there is not a YAML mapping"};
  std::vector<std::string> out;
  compare(a, b, "", ignored, out);
  return out;
}

}  // namespace conductor::config
