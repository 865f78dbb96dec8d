// Deck keys of the global tier (PPO policy): scheduler.policy and the policy-training section.
#include "conductor/config/schema.hpp"

namespace conductor::config {

void add_policy_fields(std::vector<Field>&) {}

void finalize_policy(Deck&, const LoadOptions&, std::vector<std::string>&) {}

}  // namespace conductor::config
