#include "conductor/cli/global_tier.hpp"

#include <cstdio>

#include "conductor/cli/cli.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"
#if CONDUCTOR_HAVE_POLICY
#include "conductor/policy/ppo_planner.hpp"
#endif

namespace conductor::cli {

#if !CONDUCTOR_HAVE_POLICY
namespace {
[[noreturn]] void fail_without_global_tier(const std::string& what) {
  if (mpi::world_rank() == 0) std::fprintf(stderr, "conductor: %s\n", no_global_tier(what).c_str());
  throw CollectiveExit(kExitUsage);  // every rank read the same deck and ends here
}
}  // namespace
#endif

std::string no_global_tier(const std::string& what) {
  return what +
         " needs the global tier (the PPO planner, LibTorch), and this build has none: it was configured with "
         "-DCONDUCTOR_POLICY=OFF. Use scheduler.kind: static, or install LibTorch (apt-get install libtorch-dev) "
         "and configure with -DCONDUCTOR_POLICY=ON.";
}

sched::PlannerFactory planner_factory(const plan::Plan& plan) {
  if (plan.scheduler.kind == "static") return {};
#if CONDUCTOR_HAVE_POLICY
  return [plan](const sched::Schedule& generated) { return policy::make_ppo_planner(plan, generated); };
#else
  fail_without_global_tier("scheduler.kind: " + plan.scheduler.kind);
#endif
}

#if !CONDUCTOR_HAVE_POLICY
// train_policy.cpp is not built without the policy layer; the command stays listed and says why it fails.
int cmd_train_policy(const Invocation&) { fail_without_global_tier("conductor train-policy"); }
#endif

}  // namespace conductor::cli
