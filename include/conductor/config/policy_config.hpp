#pragma once
// Deck settings of the global tier's PPO policy (scheduler.policy and the training keys).
#include <string>

namespace conductor::config {

struct PolicyConfig {};

}  // namespace conductor::config
