#include "conductor/util/error.hpp"

namespace conductor {

namespace {
std::string join_problems(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems) {
    if (!text.empty()) text += '\n';
    text += p;
  }
  return text;
}
}  // namespace

DeckError::DeckError(std::vector<std::string> problems)
    : InputError(join_problems(problems)), problems_(std::move(problems)) {}

}  // namespace conductor
