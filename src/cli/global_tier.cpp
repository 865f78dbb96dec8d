#include "conductor/cli/global_tier.hpp"

#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <vector>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/cli/size_guard.hpp"
#include "conductor/plugin/global_tier.hpp"
#include "conductor/policy/env.hpp"
#include "conductor/runtime/stop_signal.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"
#include "conductor/version.hpp"

namespace conductor::cli {

namespace {

#if !CONDUCTOR_HAVE_POLICY
[[noreturn]] void fail_without_global_tier(const std::string& what) {
  if (mpi::world_rank() == 0) std::fprintf(stderr, "conductor: %s\n", no_global_tier(what).c_str());
  throw CollectiveExit(kExitUsage);  // every rank read the same deck and ends here
}
#else
// Where the module may be: CONDUCTOR_GLOBAL_TIER (a path), beside the binary (the build folder), the install
// layout (PREFIX/bin/conductor, PREFIX/lib/conductor/), and the build folder this binary was built in (tests and
// benchmarks live in folders of their own).
std::vector<std::filesystem::path> module_candidates() {
  if (const char* env = std::getenv("CONDUCTOR_GLOBAL_TIER"); env && *env) {
    // A bare name (no '/') is a file in the working folder, as checked below: dlopen would search the library
    // path for it instead, and load another file than the one checked (or the system's library of that name).
    std::filesystem::path path(env);
    if (path.is_relative()) path = std::filesystem::path(".") / path;
    return {path};
  }
  std::vector<std::filesystem::path> paths;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    paths.push_back(exe.parent_path() / plugin::kModuleName);
    paths.push_back(exe.parent_path().parent_path() / "lib" / "conductor" / plugin::kModuleName);
  }
  paths.emplace_back(CONDUCTOR_GLOBAL_TIER_BUILD_PATH);
  return paths;
}

// Why `path` cannot be a complete 64-bit ELF shared object, or "" when its ELF header and the tables it points to
// lie within the file. dlopen maps a file by its program headers, past the file's end when it was truncated (a
// copy cut short, a full disk): touching those pages is a SIGBUS, not an error dlopen could report.
std::string elf_problem(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return "not a regular file";
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return "cannot be read (" + ec.message() + ")";
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::string("cannot be opened (") + std::strerror(errno) + ")";
  auto truncated = [&](unsigned long long needs) {
    return "truncated or not a shared library (size " + std::to_string(size) + " bytes, its ELF header needs " +
           std::to_string(needs) + ")";
  };
  Elf64_Ehdr eh{};
  f.read(reinterpret_cast<char*>(&eh), sizeof eh);
  const auto got = static_cast<std::size_t>(f.gcount());
  if (got < SELFMAG || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
    return "not a shared library (it does not start with an ELF header; size " + std::to_string(size) + " bytes)";
  if (got < sizeof eh) return truncated(sizeof eh);
  if (eh.e_ident[EI_CLASS] != ELFCLASS64)
    return "not a 64-bit shared library (ELF class " + std::to_string(eh.e_ident[EI_CLASS]) + ")";
  if (eh.e_type != ET_DYN) return "not a shared library (ELF type " + std::to_string(eh.e_type) + ")";
  // The end of every range the header names: the section and program header tables and each segment's bytes.
  // Offsets come from the file: summed in 128 bits, so a damaged header cannot wrap around.
  using u128 = unsigned __int128;
  u128 needs = sizeof eh;
  needs = std::max<u128>(needs, u128(eh.e_shoff) + u128(eh.e_shnum) * eh.e_shentsize);
  needs = std::max<u128>(needs, u128(eh.e_phoff) + u128(eh.e_phnum) * eh.e_phentsize);
  auto clamp = [](u128 v) { return static_cast<unsigned long long>(std::min<u128>(v, ~0ULL)); };
  if (needs > size) return truncated(clamp(needs));
  if (eh.e_phentsize < sizeof(Elf64_Phdr) && eh.e_phnum > 0)
    return "not a shared library (program header entries of " + std::to_string(eh.e_phentsize) + " bytes)";
  for (int i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph{};
    f.seekg(static_cast<std::streamoff>(eh.e_phoff + static_cast<std::uint64_t>(i) * eh.e_phentsize));
    f.read(reinterpret_cast<char*>(&ph), sizeof ph);
    if (!f) return truncated(clamp(needs));
    needs = std::max<u128>(needs, u128(ph.p_offset) + ph.p_filesz);
  }
  if (needs > size) return truncated(clamp(needs));
  return "";
}

// `conductor train-policy`'s size guard, before anything is loaded or written: the simulation of the deck's step
// as `simulate` estimates it (without trace events: train-policy writes no trace), then an iteration's
// experience: up to one decision per op of each of ppo.episodes episodes, each recorded (policy::Decision) and
// copied into the update's tensors. InputError above the limit (run.memory_limit_gb, else MemAvailable).
void check_train_policy_size(const config::Deck& deck) {
  config::Deck untraced = deck;
  untraced.trace.enabled = false;
  check_simulate_size(untraced, 0);
  constexpr double kBytesPerDecision =
      sizeof(policy::Decision) +
      4.0 * (policy::kMaxCandidates * policy::kNumFeatures + policy::kMaxCandidates + policy::kNumGlobal + 2);
  const double ops = static_cast<double>(deck.parallel.pipeline) * deck.parallel.microbatches *
                     deck.parallel.virtual_chunks * 3;  // F, B and W: an upper bound for every schedule
  const double bytes = ops * deck.policy.episodes * kBytesPerDecision;
  std::string source;
  const std::uint64_t limit = memory_limit_bytes(deck, source);
  if (limit == 0 || bytes <= static_cast<double>(limit)) return;
  char text[512];
  std::snprintf(text, sizeof text,
                "train-policy needs about %.3g GB of memory for an iteration's experience (up to %.0f decisions: "
                "parallel.pipeline %d x microbatches %d x virtual %d x 3 ops x ppo.episodes %d, %.0f bytes each), "
                "above the limit of %.3g GB set by %s; make the pipeline, the microbatch count or ppo.episodes "
                "smaller",
                bytes / 1e9, ops * deck.policy.episodes, deck.parallel.pipeline, deck.parallel.microbatches,
                deck.parallel.virtual_chunks, deck.policy.episodes, kBytesPerDecision, static_cast<double>(limit) / 1e9,
                source.c_str());
  throw InputError(text);
}

// One module per process, loaded on first use and never unloaded: planners it made live until exit.
const plugin::GlobalTier& load_global_tier(const std::string& what) {
  std::string tried;
  for (const auto& path : module_candidates()) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) {
      tried += "\n  " + path.string() + ": " + (ec ? "cannot be looked up (" + ec.message() + ")" : "not there");
      continue;
    }
    if (const std::string problem = elf_problem(path); !problem.empty()) {
      tried += "\n  " + path.string() + ": " + problem;
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      tried += "\n  " + path.string() + ": " + dlerror();
      continue;
    }
    using Entry = const plugin::GlobalTier* (*)();
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, plugin::kEntrySymbol));
    const plugin::GlobalTier* table = entry ? entry() : nullptr;
    if (!table || table->abi_version != plugin::kAbiVersion || table->plan_size != sizeof(plan::Plan) ||
        table->deck_size != sizeof(config::Deck) || std::string(table->revision) != kGitRevision) {
      tried += "\n  " + path.string() +
               (table ? ": built from another revision of conductor (" + std::string(table->revision) +
                            "; this binary is " + kGitRevision + ")"
                      : ": not conductor's global tier module (no " + std::string(plugin::kEntrySymbol) +
                            " entry table; built from another revision, or another library)");
      continue;  // dlclose would be fine here, but a module refused stays harmlessly mapped
    }
    table->attach({mpi::world_rank(), mpi::world_size(), static_cast<int>(log::level()), &runtime::stop_requested,
                   &runtime::stop_signal_number});
    log::debug("global tier: " + path.string());
    return *table;
  }
  const std::string message = what + " needs the global tier's module " + plugin::kModuleName +
                              " (the PPO planner and LibTorch, loaded only when used), and none could be loaded; "
                              "tried:" +
                              tried +
                              "\nSet CONDUCTOR_GLOBAL_TIER to its path, or reinstall conductor (make install puts it "
                              "in PREFIX/lib/conductor).";
  // The user's CONDUCTOR_GLOBAL_TIER is an input (exit 2, as a deck's bad path is); an install without it, a failure.
  if (const char* env = std::getenv("CONDUCTOR_GLOBAL_TIER"); env && *env) throw InputError(message);
  throw Error(message);
}

const plugin::GlobalTier& global_tier(const std::string& what) {
  static std::once_flag once;
  static const plugin::GlobalTier* table = nullptr;
  std::call_once(once, [&] { table = &load_global_tier(what); });  // a throw leaves the flag unset: retried
  return *table;
}
#endif

}  // namespace

std::string no_global_tier(const std::string& what) {
  return what +
         " needs the global tier (the PPO planner, LibTorch), and this build has none: it was configured with "
         "-DCONDUCTOR_POLICY=OFF. Use scheduler.kind: static, or install LibTorch (apt-get install libtorch-dev) "
         "and configure with -DCONDUCTOR_POLICY=ON.";
}

sched::PlannerFactory planner_factory(const plan::Plan& plan) {
  if (plan.scheduler.kind == "static") return {};
#if CONDUCTOR_HAVE_POLICY
  // Loaded where a planner is made (rank 0 of a run), so the other ranks never load LibTorch.
  return [plan](const sched::Schedule& generated) {
    return global_tier("scheduler.kind: " + plan.scheduler.kind).make_planner(plan, generated);
  };
#else
  fail_without_global_tier("scheduler.kind: " + plan.scheduler.kind);
#endif
}

int cmd_train_policy(const Invocation& inv) {
#if CONDUCTOR_HAVE_POLICY
  const config::Deck deck = load_deck(inv, config::Command::TrainPolicy);
  // Before LibTorch is loaded or anything written: a deck too large for the machine is refused as `simulate`
  // refuses it (the episodes simulate the deck's step), and another run's results in run.output are never
  // replaced.
  check_train_policy_size(deck);
  check_run_output(deck, config::Command::TrainPolicy);
  // SIGTERM/SIGINT (and the others `run` handles) ask the training to stop: it leaves run.output as it was
  // (plugin/train_policy.cpp). Installed before the module loads, so a signal while LibTorch starts is kept.
  runtime::install_stop_handlers();
  return global_tier("conductor train-policy").train_policy(deck);
#else
  // The command stays listed and says why it fails.
  fail_without_global_tier("conductor train-policy");
#endif
}

}  // namespace conductor::cli
