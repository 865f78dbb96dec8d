#include "conductor/cli/cli.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <thread>

#include "conductor/runtime/stop_signal.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/hdf5.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"
#include "conductor/util/progress.hpp"
#include "conductor/version.hpp"

namespace conductor::cli {

const std::vector<CommandSpec>& commands() {
  static const std::vector<CommandSpec> specs = {
      {"run",
       "train under MPI, one rank per pipeline stage",
       "DECK [FRAGMENT.yaml ...] [key.path=value ...]",
       "Launch with `mpirun -np P conductor run DECK` where P = parallel.pipeline. Writes resolved.yaml, "
       "trace.h5, summary.json and metrics.jsonl (a line per step) to run.output.",
       {},
       true,
       &cmd_run},
      {"simulate",
       "simulate the deck's schedule in virtual time",
       "DECK [FRAGMENT.yaml ...] [key.path=value ...] [--json]",
       "Discrete-event simulation of the deck's schedule, cost model and noise. Writes summary.json (and "
       "trace.h5 when trace.enabled) to run.output.",
       {{"--json", false, "print the summary as one JSON object instead of the human summary"}},
       false,
       &cmd_simulate},
      {"validate",
       "check a deck and print it fully resolved",
       "DECK [FRAGMENT.yaml ...] [key.path=value ...] [--as COMMAND | --output-for COMMAND]  (or: --keys)",
       "Prints the resolved deck (defaults included) as YAML, or every problem found with its location; "
       "exit code 2 on problems. It checks the deck as `conductor run` would (the model is built from it: "
       "with --as or --output-for simulate or train-policy, as that command would). The schedule is built, the data "
       "files' headers are read (their tokens are checked when a run opens them), the checkpoint of "
       "checkpoint.resume is found and, with scheduler.kind ppo, the policy is loaded into a planner.",
       {{"--keys", false, "print every deck key (type, default, allowed values, meaning) as Markdown; no DECK"},
        {"--as", true,
         "COMMAND (run, simulate or train-policy): check the deck by COMMAND's rules (default: run's); the job "
         "scripts' first check"},
        {"--output-for", true,
         "COMMAND (run, simulate or train-policy): as --as, and also check run.output (and checkpoint.path) as "
         "COMMAND would before writing anything (exit 2 where it would refuse); the job scripts check before they "
         "record"}},
       false,
       &cmd_validate},
      {"schedule",
       "print the deck's schedule: text form, torch CSV or a timeline",
       "DECK [FRAGMENT.yaml ...] [key.path=value ...] [--format text|csv|chart]",
       "Prints the schedule the deck runs (generated, or read from schedule.kind: file:PATH and validated): "
       "conductor's text form, torch.distributed.pipelining's CSV (one line per rank; docs/schedules.md), or an "
       "ASCII timeline of its first simulated step. Writes no files.",
       {{"--format", true, "text (default), csv or chart"}},
       false,
       &cmd_schedule},
      {"train-policy",
       "train the PPO scheduling policy in the simulator",
       "DECK [FRAGMENT.yaml ...] [key.path=value ...]",
       "Trains the global-tier policy on the deck's cost model and noise; writes the policy file, a training "
       "curve and a summary to run.output.",
       {},
       false,
       &cmd_train_policy},
  };
  return specs;
}

namespace {

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: conductor COMMAND DECK [FRAGMENT.yaml ...] [key.path=value ...] [flags]\n"
               "       conductor --version | --help | COMMAND --help\n\ncommands:\n");
  for (const auto& c : commands()) std::fprintf(out, "  %-13s %s\n", c.name.c_str(), c.summary.c_str());
  std::fprintf(out,
               "\nA deck is a YAML input file. Fragments (YAML files, also written @FRAGMENT.yaml) merge onto it in\n"
               "order, then overrides replace single keys (see docs/deck.md).\n");
}

void print_command_help(const CommandSpec& c) {
  std::printf("usage: conductor %s %s\n\n%s\n\n%s\n", c.name.c_str(), c.usage.c_str(), c.summary.c_str(),
              c.details.c_str());
  std::printf("\nflags:\n  %-12s %s\n", "--help", "show this help");
  for (const auto& f : c.flags) {
    std::printf("  %-12s %s\n", (f.name + (f.takes_value ? " V" : "")).c_str(), f.help.c_str());
  }
}

// The command's exit status, unless what it printed on standard output did not get there (a full disk, a closed
// pipe, /dev/full): then a failure, said on standard error, not a success with the output lost.
int written_out(int status) {
  if (std::fflush(stdout) == 0 && !std::ferror(stdout)) return status;
  const int err = errno;
  std::fprintf(stderr, "conductor: cannot write to standard output (%s); what it printed is incomplete\n",
               std::strerror(err != 0 ? err : EIO));
  return status != 0 ? status : kExitFailure;
}

// Under a launcher (mpirun, srun), a rank other than the first: a mistake found before MPI starts (in the
// arguments or the environment, the same on every rank) is then said by the first rank alone, not once per rank.
bool quiet_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* v = std::getenv(name); v && *v) return std::string(v) != "0";
  }
  return false;
}

// A quiet rank's exit after such a mistake: once the first rank has said it. A launcher that sees one rank fail
// ends the others (mpirun, srun --kill-on-bad-exit); a quiet rank that exited first got the first rank killed
// before it printed, and the mistake went unsaid (seen under load). The launcher ends this wait when the first
// rank exits (no stop handler is installed yet: its SIGTERM ends the process); one that lets the other ranks run
// on sees them exit after kQuietWait.
int quiet_exit() {
  constexpr auto kQuietWait = std::chrono::seconds(10);
  std::this_thread::sleep_for(kQuietWait);
  return kExitUsage;
}

int usage_error(const std::string& message) {
  if (quiet_rank()) return quiet_exit();
  std::fprintf(stderr, "conductor: %s\n", message.c_str());
  print_usage(stderr);
  return kExitUsage;
}

// A command's own usage after a mistake in its arguments (its flags, not every command's).
int command_usage_error(const CommandSpec& c, const std::string& message) {
  if (quiet_rank()) return quiet_exit();
  std::fprintf(stderr, "conductor: %s\nusage: conductor %s %s\nflags:", message.c_str(), c.name.c_str(),
               c.usage.c_str());
  for (const auto& f : c.flags) std::fprintf(stderr, " %s%s", f.name.c_str(), f.takes_value ? " V" : "");
  std::fprintf(stderr, "%s (conductor %s --help says more)\n", c.flags.empty() ? " none" : "", c.name.c_str());
  return kExitUsage;
}

// CONDUCTOR_INIT_TIMEOUT_S (mpi::Session): seconds as a plain decimal (no blanks, no hexadecimal), 0 (never) or
// mpi::kMinInitTimeoutS .. 1e9; unset or empty: the default; -1 when refused (environment_problem(), before MPI
// starts).
double init_timeout_s(const char* text) {
  if (!text || !*text) return mpi::kDefaultInitTimeoutS;
  const double v = parse_plain_decimal(text);  // 1e-400 refused: it would read as 0 (for ever)
  if (v < 0) return -1.0;
  return v == 0 || (v >= mpi::kMinInitTimeoutS && v <= 1e9) ? v : -1.0;
}

// The environment variables conductor reads, each with a value it understands or unset (README: "Environment
// variables"): a misspelt level or interval was ignored silently, so a run logged or reported otherwise than asked.
// More OpenMP threads per process than any node has cores (the largest have a few hundred hardware threads).
constexpr int kMaxThreads = 1024;

// OMP_NUM_THREADS as libgomp reads it: positive decimal integers separated by commas, blanks around each allowed
// ("4, 2", "$(nproc) "), a '+' and leading zeros too; each at most kMaxThreads.
bool thread_counts_valid(const std::string& value) {
  std::size_t at = 0;
  do {
    const std::size_t end = std::min(value.find(',', at), value.size());
    std::string part = value.substr(at, end - at);
    const std::size_t first = part.find_first_not_of(" \t"), last = part.find_last_not_of(" \t");
    part = first == std::string::npos ? "" : part.substr(first, last - first + 1);
    if (!part.empty() && part.front() == '+') part.erase(0, 1);
    const std::size_t digit = part.find_first_not_of('0');
    const std::string digits = digit == std::string::npos ? "0" : part.substr(digit);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || digits.size() > 4) return false;
    const int n = std::stoi(digits);
    if (n < 1 || n > kMaxThreads) return false;
    at = end + 1;
  } while (at <= value.size());
  return true;
}

std::string environment_problem() {
  if (const char* v = std::getenv("CONDUCTOR_LOG"); v && *v) {
    log::Level level;
    if (!log::parse_level(v, level))
      return std::string("CONDUCTOR_LOG = '") + v +
             "' is not a log level; allowed: error, warn, info, debug (unset: info)";
  }
  if (const char* v = std::getenv("OMP_NUM_THREADS"); v && !thread_counts_valid(v)) {
    // libgomp says "Invalid value" and goes on with its default (every core on every rank); a huge count made it
    // crash (100000: SIGSEGV in the first parallel region) or a step take a minute (5000).
    return "OMP_NUM_THREADS = '" + shown(v) + "' is not a thread count; allowed: an integer 1 .. " +
           std::to_string(kMaxThreads) + ", or a comma-separated list of them (one per nesting level); unset: " +
           "the node's cores shared among its ranks";
  }
  if (const char* v = std::getenv("CONDUCTOR_INIT_TIMEOUT_S"); v && *v && init_timeout_s(v) < 0) {
    return "CONDUCTOR_INIT_TIMEOUT_S = '" + shown(v) +
           "' is not a number of seconds it allows: " + format_double(mpi::kMinInitTimeoutS) +
           " .. 1e9 as a plain decimal, or 0 to wait for MPI start-up for " +
           "ever (unset: " + format_double(mpi::kDefaultInitTimeoutS) + ")";
  }
  if (const char* v = std::getenv("CONDUCTOR_PROGRESS_S"); v && *v && parse_progress_interval(v) < 0) {
    return std::string("CONDUCTOR_PROGRESS_S = '") + v +
           "' is not a number of seconds; allowed: a plain decimal >= 0 within a double's range (0: a line per "
           "update; unset: 1)";
  }
  return {};
}

}  // namespace

namespace {

// What is wrong with a deck or fragment file before a byte of it is read ("" when nothing): a folder reads as an
// empty deck (every default, exit 0), and a huge file costs the YAML parser about 150 times its size on every rank.
std::string input_file_problem(const std::string& path, const char* what) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) {
    if (std::string(what) == "deck") return {};  // read_and_broadcast names a missing file
    // A stray word on the command line lands here too: say what the argument was taken for.
    return path + ": no such fragment file (arguments after the deck are YAML fragments, merged onto it, or " +
           "key.path=value overrides)";
  }
  if (std::filesystem::is_directory(status)) return path + ": is a folder; the " + what + " is a YAML file";
  // Reading a device such as /dev/zero never ends (its size reads as 0); a pipe (process substitution) is read.
  if (std::filesystem::is_character_file(status) || std::filesystem::is_block_file(status) ||
      std::filesystem::is_socket(status))
    return path + ": is a device or socket, not a file; the " + what + " is a YAML file";
  const auto bytes = std::filesystem::file_size(path, ec);
  if (!ec && bytes > kMaxDeckBytes) {
    return path + ": " + std::to_string(bytes) + " bytes; a " + what + " is at most " + std::to_string(kMaxDeckBytes) +
           " bytes (1 MB); large inputs (schedules, data) are files the deck names";
  }
  return {};
}

// Every problem of the deck and fragment files, checked on rank 0 and shared.
void check_input_files(const Invocation& inv) {
  std::string problem;
  if (mpi::world_rank() == 0) {
    problem = input_file_problem(inv.deck_path, "deck");
    for (const auto& path : inv.fragment_paths) {
      if (!problem.empty()) break;
      problem = input_file_problem(path, "fragment");
    }
  }
  mpi::check_all(problem.empty(), problem, kExitUsage);
}

}  // namespace

config::Deck load_deck(const Invocation& inv, config::Command command, int world_size) {
  config::LoadOptions options;
  options.source_name = inv.deck_path;
  options.overrides = inv.overrides;
  options.command = command;
  options.world_size = world_size < 0 ? mpi::world_size() : world_size;
  options.from_file = true;
  check_input_files(inv);
  try {
    const std::string text = mpi::read_and_broadcast(inv.deck_path);
    for (const auto& path : inv.fragment_paths) options.fragments.push_back({path, mpi::read_and_broadcast(path)});
    return config::parse_deck(text, options);
  } catch (const DeckError& e) {
    if (mpi::world_rank() == 0) {
      std::fprintf(stderr, "conductor: %zu problem%s in the deck:\n", e.problems().size(),
                   e.problems().size() == 1 ? "" : "s");
      for (const auto& p : e.problems()) std::fprintf(stderr, "  %s\n", p.c_str());
    }
    throw CollectiveExit(kExitUsage);
  } catch (const InputError& e) {
    if (mpi::world_rank() == 0) std::fprintf(stderr, "conductor: %s\n", e.what());
    throw CollectiveExit(kExitUsage);
  }
}

namespace {

// A standard stream the launcher closed (`>&-`, a daemon's) leaves its number free, and the next file opened takes
// it: log lines and the summary went into trace.h5, curve.csv or the folder's lock file, exit 0. Each closed one
// is /dev/null instead (what they print is lost, as the launcher asked; the exit status still says how it went).
void open_closed_standard_streams() {
  for (int fd = STDIN_FILENO; fd <= STDERR_FILENO; ++fd) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int opened = ::open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
    if (opened >= 0 && opened != fd) {  // open takes the lowest free number, fd itself once the lower ones are open
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  open_closed_standard_streams();
  if (argc < 2) return usage_error("missing command");
  const std::string first = argv[1];
  if (first == "--help" || first == "-h") {
    print_usage(stdout);
    return 0;
  }
  if (first == "--version") {
    std::printf("conductor %s (git %s)\n", kVersion, kGitRevision);
    return 0;
  }
  const CommandSpec* spec = nullptr;
  for (const auto& c : commands()) {
    if (c.name == first) spec = &c;
  }
  if (!spec) return usage_error("unknown command '" + printable(first) + "'");
  if (const std::string problem = environment_problem(); !problem.empty()) {
    if (quiet_rank()) return quiet_exit();
    std::fprintf(stderr, "conductor: %s\n", problem.c_str());
    return kExitUsage;
  }

  Invocation inv;
  inv.command = spec->name;
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_command_help(*spec);
      return 0;
    }
    if (arg.empty()) {
      // An empty argument (an unset shell variable, quoted) is nothing a user meant: as the DECK it made the next
      // argument the deck.
      return usage_error(
          "argument " + std::to_string(i) + " is empty; expected " +
          (inv.deck_path.empty() ? "the DECK (a YAML file)" : "a FRAGMENT.yaml, a key.path=value override or a flag"));
    }
    if (arg.size() > 1 && arg[0] == '-') {
      // --flag V or --flag=V (the GNU long-option form).
      const std::size_t eq = arg.rfind("--", 0) == 0 ? arg.find('=') : std::string::npos;
      const std::string name = arg.substr(0, eq);
      const FlagSpec* flag = nullptr;
      for (const auto& f : spec->flags) {
        if (f.name == name) flag = &f;
      }
      if (!flag) return command_usage_error(*spec, "unknown flag '" + printable(name) + "' for '" + spec->name + "'");
      std::string value;
      if (flag->takes_value && eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (flag->takes_value) {
        if (i + 1 >= argc) return command_usage_error(*spec, "flag '" + arg + "' needs a value");
        value = argv[++i];
      } else if (eq != std::string::npos) {
        return command_usage_error(*spec, "flag '" + name + "' takes no value (got '" + printable(arg) + "')");
      }
      inv.flags[name] = value;
    } else if (inv.deck_path.empty()) {
      inv.deck_path = arg;
    } else if (arg[0] != '@' && arg.find('=') != std::string::npos) {
      inv.overrides.push_back(arg);
    } else if (!inv.overrides.empty()) {
      // Overrides always apply after every fragment; a fragment written after one would not win over it.
      return usage_error("fragment '" + arg + "' after the override '" + inv.overrides.back() +
                         "': write fragments before the key.path=value overrides (overrides apply last)");
    } else {
      const std::string path = arg[0] == '@' ? arg.substr(1) : arg;
      if (path.empty()) return usage_error("'@' needs a fragment file name: @FRAGMENT.yaml");
      inv.fragment_paths.push_back(path);
    }
  }
  const bool keys = spec->name == "validate" && inv.has_flag("--keys");
  if (!keys && inv.deck_path.empty()) return usage_error("'" + spec->name + "' needs a DECK");
  // --keys prints the schema, not a deck's check: a deck beside it would read as checked (exit 0) while nothing
  // of it was read.
  if (keys && (!inv.deck_path.empty() || inv.flags.size() > 1)) {
    std::string other = "'" + printable(inv.deck_path) + "'";
    if (inv.deck_path.empty()) {
      for (const auto& [flag, value] : inv.flags) {
        if (flag != "--keys") other = "the flag " + flag;
      }
    }
    return command_usage_error(*spec, "--keys takes no DECK, fragment, override or other flag (got " + other +
                                          "): it prints every deck key; check a deck with 'conductor validate DECK'");
  }

  hdf5::skip_teardown_at_exit();
  hdf5::never_print_errors();
  // A file-size limit (ulimit -f, a job's RLIMIT_FSIZE) ends a process with SIGXFSZ by default: no message, no
  // summary, a half-written trace. Ignored, the write fails with EFBIG, which every writer reports naming the file
  // (as a full disk), collectively.
  std::signal(SIGXFSZ, SIG_IGN);
  // A reader that quits early (`conductor simulate ... | head`) ended the process with SIGPIPE: no message, and a
  // simulation's results lost mid-run. Ignored, the writes to the pipe fail instead, the command finishes its
  // work, and the end says that standard output was not written (written_out).
  std::signal(SIGPIPE, SIG_IGN);
  // A stop asked for while the command starts (MPI start-up, loading, a checkpoint's check) is kept, not fatal:
  // a run then stops after its first step, as after any other (scripts/conductor-launch signals as soon as the
  // ranks exist); simulate and train-policy before they write anything.
  if (spec->name == "run" || spec->name == "simulate" || spec->name == "train-policy") runtime::install_stop_handlers();
  std::unique_ptr<mpi::Session> session;
  if (spec->distributed) {
    session = std::make_unique<mpi::Session>(&argc, &argv, init_timeout_s(std::getenv("CONDUCTOR_INIT_TIMEOUT_S")));
  }
  try {
    return written_out(spec->fn(inv));
  } catch (const CollectiveExit& e) {
    return e.exit_code();
  } catch (const Error& e) {
    if (mpi::world_size() > 1) mpi::abort_all(e.what(), e.exit_code());
    log::error(e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    if (mpi::world_size() > 1) mpi::abort_all(e.what(), kExitFailure);
    log::error(e.what());
    return kExitFailure;
  }
}

}  // namespace conductor::cli
