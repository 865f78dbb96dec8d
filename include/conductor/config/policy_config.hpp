#pragma once
// Deck settings of the global tier's PPO policy: scheduler.policy / scheduler.* (how the ppo scheduler runs)
// and ppo.* (how `conductor train-policy` trains it). Keys and meanings: src/config/schema_policy.cpp.
#include <string>
#include <vector>

namespace conductor::config {

struct PolicyConfig {
  // scheduler.* (kind: ppo)
  std::string path;        // scheduler.policy; "" = the shipped inputs/policies/default.pt
  double ema = 0.5;        // scheduler.ema: weight of the last step in the online cost estimate
  int verify_samples = 2;  // scheduler.verify_samples: noise draws to check the order (0 = off)
  // ppo.* (train-policy)
  int iterations = 60;
  int episodes = 16;  // episodes (simulated steps) per iteration
  double learning_rate = 3e-3;
  double clip = 0.2;
  double gamma = 1.0;
  double lambda = 0.95;
  double entropy_coef = 0.01;
  double value_coef = 0.5;
  double grad_clip = 0.5;
  int epochs = 4;
  int minibatch = 256;
  int hidden = 32;
  unsigned long long seed = 7;
  std::vector<double> noise_levels = {0.0, 0.3};  // per-episode gaussian level drawn from [lo, hi]
  double cost_spread = 0.2;                       // per-episode, per-rank, per-kind cost factor exp(spread * z)
  std::string heuristic = "bfw";  // ranking behind the heuristic-rank feature (and the untrained policy)
  int eval_steps = 20;            // simulated steps per baseline in the summary
};

}  // namespace conductor::config
