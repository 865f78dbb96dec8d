#pragma once
// Deck sections of the scheduling layers: schedule, cost model, noise, and the global-tier scheduler.
#include <string>
#include <vector>

namespace conductor::config {

struct ScheduleConfig {
  std::string kind = "1f1b";          // gpipe | 1f1b | 1f1b-interleaved | zb-h1 | zb-h2 | zb-1p | zb-2p | zb-v | file:PATH
  std::string execution = "strict";   // strict | readiness
  std::string hint = "schedule";      // schedule | bf | bfw
  double memory_limit = 0;            // units of M_F per rank; 0 = the kind's default
};

struct CostConfig {
  std::vector<double> forward = {1.0};          // ms per microbatch, one value or one per stage
  std::vector<double> backward_input = {1.0};
  std::vector<double> backward_weight = {1.0};
  double comm = 0.0;                            // ms per point-to-point transfer
  double memory_after_b = -1;                   // fraction of M_F held between B and W; <0 = from the model
};

struct NoiseConfig {
  std::vector<std::string> kind = {"none"};  // none | gaussian | lognormal | straggler | congestion
  double level = 0.0;
  unsigned long long seed = 0;
};

struct SchedulerConfig {
  std::string kind = "static";  // static
};

}  // namespace conductor::config
