#pragma once
// The global tier as a loadable module: libconductor_global_tier.so holds the policy layer (the PPO planner,
// train-policy) and LibTorch behind it. The binary loads it (cli/global_tier.cpp) only when a deck asks for
// scheduler.kind: ppo or for `conductor train-policy`: linking LibTorch into the binary cost every process
// about a second of start-up (relocations and LibTorch's operator registration), on every rank of every run.
//
// The module carries its own copies of the layers below policy (static libraries, symbols hidden), so the
// binary and the module must come from the same build: the table below names the revision and the sizes of the
// structs that cross the boundary, and the loader refuses a module that differs.
#include <memory>

#include "conductor/config/deck.hpp"
#include "conductor/plan/plan.hpp"
#include "conductor/sched/planner.hpp"

namespace conductor::plugin {

// 2: HostState carries the binary's stop-signal state; 3: OrderPlanner::policy_source (a virtual the binary calls)
inline constexpr int kAbiVersion = 3;
inline constexpr const char* kEntrySymbol = "conductor_global_tier_v1";
inline constexpr const char* kModuleName = "libconductor_global_tier.so";

// What the module's copy of util::log must share with the binary's (rank prefix, level), and the binary's
// SIGTERM/SIGINT state (runtime/stop_signal.hpp: the handlers are the binary's, the module has no copy of them).
struct HostState {
  int rank = 0;
  int world = 1;
  int log_level = 0;
  bool (*stop_requested)() = nullptr;  // a stop signal arrived (null: never)
  int (*stop_signal)() = nullptr;      // which one (0 if none)
};

struct GlobalTier {
  int abi_version = kAbiVersion;
  const char* revision = nullptr;  // CONDUCTOR_GIT_REVISION of the module's build
  std::size_t plan_size = sizeof(plan::Plan);
  std::size_t deck_size = sizeof(config::Deck);
  void (*attach)(const HostState& host) = nullptr;
  std::unique_ptr<sched::OrderPlanner> (*make_planner)(const plan::Plan& plan,
                                                       const sched::Schedule& generated) = nullptr;
  // `conductor train-policy` once the deck is loaded (plugin/train_policy.cpp); returns the exit status.
  int (*train_policy)(const config::Deck& deck) = nullptr;
};

// Defined in the module (plugin/train_policy.cpp, plugin/entry.cpp).
int train_policy(const config::Deck& deck);
const HostState& host_state();  // as the binary attached it

}  // namespace conductor::plugin

extern "C" const conductor::plugin::GlobalTier* conductor_global_tier_v1();
