#include "conductor/cli/cli.hpp"
#include "conductor/util/error.hpp"

namespace conductor::cli {

int cmd_run(const Invocation& inv) {
  (void)load_deck(inv, config::Command::Validate);
  throw Error("'" + inv.command + "' is not available in this build yet");
}

}  // namespace conductor::cli
