#pragma once
#include <string>
#include <vector>

namespace conductor::config {

// Edit distance (Damerau: adjacent transpositions count as one) for "did you mean" suggestions.
int edit_distance(const std::string& a, const std::string& b);

// The closest candidate within a distance that scales with the word's length, or "" if none is close.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace conductor::config
