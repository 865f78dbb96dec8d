#include "conductor/cli/global_tier.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <vector>

#include "conductor/cli/cli.hpp"
#include "conductor/cli/run_folder.hpp"
#include "conductor/plugin/global_tier.hpp"
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
  if (const char* env = std::getenv("CONDUCTOR_GLOBAL_TIER"); env && *env) return {env};
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

// One module per process, loaded on first use and never unloaded: planners it made live until exit.
const plugin::GlobalTier& load_global_tier(const std::string& what) {
  std::string tried;
  for (const auto& path : module_candidates()) {
    if (!std::filesystem::exists(path)) {
      tried += "\n  " + path.string() + ": not there";
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
      tried += "\n  " + path.string() + ": built from another revision of conductor (" +
               (table ? std::string(table->revision) : std::string("no entry table")) + "; this binary is " +
               kGitRevision + ")";
      continue;  // dlclose would be fine here, but a module refused stays harmlessly mapped
    }
    table->attach({mpi::world_rank(), mpi::world_size(), static_cast<int>(log::level())});
    log::note("global tier: " + path.string());
    return *table;
  }
  throw Error(what + " needs the global tier's module " + plugin::kModuleName +
              " (the PPO planner and LibTorch, loaded only when used), and none could be loaded; tried:" + tried +
              "\nSet CONDUCTOR_GLOBAL_TIER to its path, or reinstall conductor (make install puts it in "
              "PREFIX/lib/conductor).");
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
  // Before LibTorch is loaded or anything written: another run's results in run.output are never replaced.
  check_run_output(deck, config::Command::TrainPolicy);
  return global_tier("conductor train-policy").train_policy(deck);
#else
  // The command stays listed and says why it fails.
  fail_without_global_tier("conductor train-policy");
#endif
}

}  // namespace conductor::cli
