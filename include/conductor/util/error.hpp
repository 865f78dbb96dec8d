#pragma once
// Errors carry the process exit code they end the run with: 2 for bad input (deck, flags, files the user
// named), 1 for failures while running (3, kExitStopped, is a clean stop, not an error). main() turns them into
// messages and exit codes; nothing else exits.
#include <stdexcept>
#include <string>
#include <vector>

namespace conductor {

inline constexpr int kExitUsage = 2;    // bad command line, deck, or input file
inline constexpr int kExitFailure = 1;  // a failure while running
inline constexpr int kExitStopped = 3;  // a clean stop by SIGTERM/SIGINT: last step finished, everything written

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message, int exit_code = kExitFailure)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

// Bad input from the user: deck keys, overrides, schedule files, checkpoints of the wrong shape.
class InputError : public Error {
 public:
  explicit InputError(const std::string& message) : Error(message, kExitUsage) {}
};

// Bad input whose cause is a memory limit (a schedule that cannot fit it): the caller may name the key that set it.
class MemoryLimitError : public InputError {
 public:
  using InputError::InputError;
};

// Every problem found in a deck, reported together.
class DeckError : public InputError {
 public:
  explicit DeckError(std::vector<std::string> problems);
  const std::vector<std::string>& problems() const { return problems_; }

 private:
  std::vector<std::string> problems_;
};

// Raised on every rank after a collective check found a failure; the message was already printed once.
class CollectiveExit : public Error {
 public:
  explicit CollectiveExit(int exit_code) : Error("collective exit", exit_code) {}
};

}  // namespace conductor
