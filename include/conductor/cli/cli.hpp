#pragma once
// The `conductor` command line: one binary, subcommands, a deck, deck fragments and `key.path=value` overrides.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "conductor/config/deck.hpp"

namespace conductor::cli {

struct Invocation {
  std::string command;
  std::string deck_path;
  std::vector<std::string> fragment_paths;  // merged onto the deck in order (`FRAGMENT.yaml` or `@FRAGMENT.yaml`)
  std::vector<std::string> overrides;
  std::map<std::string, std::string> flags;  // "--json" -> "" ; "--out" -> "path"
  bool has_flag(const std::string& name) const { return flags.count(name) != 0; }
};

struct FlagSpec {
  std::string name;  // "--json"
  bool takes_value;
  std::string help;
};

struct CommandSpec {
  std::string name;
  std::string summary;
  std::string usage;  // after "conductor NAME "
  std::string details;
  std::vector<FlagSpec> flags;
  bool distributed;  // initialise MPI (run under mpirun)
  int (*fn)(const Invocation&);
};

const std::vector<CommandSpec>& commands();

// The largest deck or fragment file read (1 MB): larger files are refused before parsing.
inline constexpr std::uintmax_t kMaxDeckBytes = 1 << 20;

// Loads the deck named by the invocation with its fragments and overrides: a folder, a missing or empty file or one
// above kMaxDeckBytes is an error; rank 0 reads each file and broadcasts it when MPI is running; every rank parses
// the same texts. Problems are printed once (rank 0) and every rank throws CollectiveExit(2).
// `world_size`: the job's ranks (-1: this MPI job's; 0: not known, the rank count is not checked).
config::Deck load_deck(const Invocation& inv, config::Command command, int world_size = -1);

// Command entry points, one file each.
int cmd_validate(const Invocation& inv);
int cmd_simulate(const Invocation& inv);
int cmd_run(const Invocation& inv);
int cmd_train_policy(const Invocation& inv);
int cmd_schedule(const Invocation& inv);

// Entry point used by main(): parses argv, sets up MPI for distributed commands, maps errors to exit codes.
int main(int argc, char** argv);

}  // namespace conductor::cli
