// The module's entry table (plugin/global_tier.hpp): the one symbol the module exports.
#include "conductor/plugin/global_tier.hpp"

#include "conductor/policy/ppo_planner.hpp"
#include "conductor/util/log.hpp"
#include "conductor/version.hpp"

namespace conductor::plugin {
namespace {

HostState g_host;

void attach(const HostState& host) {
  g_host = host;
  log::set_rank(host.rank, host.world);
  log::set_level(static_cast<log::Level>(host.log_level));
}

std::unique_ptr<sched::OrderPlanner> make_planner(const plan::Plan& plan, const sched::Schedule& generated) {
  return policy::make_ppo_planner(plan, generated);
}

}  // namespace

const HostState& host_state() { return g_host; }

}  // namespace conductor::plugin

extern "C" __attribute__((visibility("default"))) const conductor::plugin::GlobalTier* conductor_global_tier_v1() {
  using namespace conductor::plugin;
  static const GlobalTier table = [] {
    GlobalTier t;
    t.revision = conductor::kGitRevision;
    t.attach = &attach;
    t.make_planner = &make_planner;
    t.train_policy = &train_policy;
    return t;
  }();
  return &table;
}
