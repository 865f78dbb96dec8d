#include "conductor/runtime/fault_injection.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace conductor::runtime {

InjectedFailure injected_failure(int rank, int step) {
  const char* env = std::getenv("CONDUCTOR_INJECT_FAILURE");
  int r = -1, s = -1;
  char how[16] = {0};
  if (!env || std::sscanf(env, "%d:%d:%15s", &r, &s, how) < 2 || r != rank || s != step) return InjectedFailure::None;
  if (!std::strcmp(how, "kill")) return InjectedFailure::Kill;
  if (!std::strcmp(how, "hang-help")) return InjectedFailure::HangHelp;
  if (!std::strcmp(how, "hang-checkpoint")) return InjectedFailure::HangCheckpoint;
  if (!std::strcmp(how, "hang-end")) return InjectedFailure::HangEnd;
  if (!std::strcmp(how, "hang-setup")) return InjectedFailure::HangSetup;
  return InjectedFailure::Throw;
}

bool injected_at(const char* variable, int rank, int step) {
  const char* env = std::getenv(variable);
  for (int used = 0, r = -1, s = -1; env && std::sscanf(env, "%d:%d%n", &r, &s, &used) == 2; env += used) {
    if (r == rank && s == step) return true;
    if (env[used] != ',') break;
    ++used;
  }
  return false;
}

}  // namespace conductor::runtime
