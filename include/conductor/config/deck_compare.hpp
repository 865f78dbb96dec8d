#pragma once
// Comparing two resolved decks key by key: which run a folder's resolved.yaml describes, against the deck at hand.
#include <string>
#include <vector>

namespace conductor::config {

// The keys whose values differ between two resolved-deck YAML texts (to_yaml's form: every key present), each
// as "key = A here, B there" (A from `here`, B from `there`), in the order of `here`; keys at or under any of
// `ignored` (dotted paths: "checkpoint", "run.steps") are skipped. A text that is not a YAML mapping gives one
// entry saying so.
std::vector<std::string> deck_differences(const std::string& here, const std::string& there,
                                          const std::vector<std::string>& ignored);

}  // namespace conductor::config
