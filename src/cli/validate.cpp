#include <cstdio>

#include "conductor/cli/cli.hpp"

namespace conductor::cli {

int cmd_validate(const Invocation& inv) {
  const config::Deck deck = load_deck(inv, config::Command::Validate);
  std::fputs(config::to_yaml(deck).c_str(), stdout);
  return 0;
}

}  // namespace conductor::cli
