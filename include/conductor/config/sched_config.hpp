#pragma once
// Deck sections of the scheduling layers: schedule, cost model, noise, and the global-tier scheduler.
#include <string>
#include <vector>

#include "conductor/plan/plan.hpp"

namespace conductor::config {

struct ScheduleConfig {
  std::string kind = "1f1b";  // gpipe | 1f1b | 1f1b-interleaved | zb-h1 | zb-h2 | zb-1p | zb-2p | zb-v | file:PATH
  std::string execution = "strict";        // strict | readiness
  std::string hint = "backfill";           // schedule | bf | bfw | backfill | critical
  double memory_limit = 0;                 // units of M_F per rank; 0 = the kind's default
  std::string placement = "auto";          // auto | loop | v (file: schedules; a generator's kind fixes its own)
  bool post_validation = false;            // optimizer post-validation, overlapping steps (docs/post-validation.md)
  double wide_spread = plan::kWideSpread;  // backfill ranks as critical from this spread on
};

struct CostConfig {
  std::vector<double> forward = {1.0};  // ms per microbatch, one value or one per stage
  std::vector<double> backward_input = {1.0};
  std::vector<double> backward_weight = {1.0};
  double comm = 0.0;           // ms per point-to-point transfer
  double memory_after_b = -1;  // fraction of M_F held between B and W; <0 = from the model
  // Derived costs (0 = off): with device_tflops > 0, F/B/W times come from the model dimensions; with
  // bandwidth_gbps > 0 every transfer also pays activation bytes / bandwidth on top of `comm`.
  double device_tflops = 0.0;   // sustained TFLOP/s of one device
  double bandwidth_gbps = 0.0;  // point-to-point bandwidth in GB/s
  // TFLOP per microbatch of F, B, W of work on the first stage that model.* does not describe (a vision encoder
  // and its projector ahead of the language model); stays with stage 0 (migration does not slice it).
  std::vector<double> encoder_tflop = {0.0, 0.0, 0.0};
};

struct NoiseConfig {
  std::vector<std::string> kind = {"none"};  // none | gaussian | lognormal | straggler | congestion
  double level = 0.0;
  unsigned long long seed = 0;
  // straggler: one rank runs `straggler_factor` times slower during steps [start, start + steps).
  int straggler_rank = -1;  // -1 = a rank drawn from the seed
  double straggler_factor = 2.0;
  int straggler_start = 0;
  int straggler_steps = 0;  // 0 = until the last step
  // congestion: each link is congested in bursts of `congestion_burst` consecutive microbatches, a burst being
  // on with probability `congestion_prob`; a congested transfer takes `congestion_delay` ms more.
  double congestion_prob = 0.2;
  int congestion_burst = 4;
  double congestion_delay = -1;  // <0 = noise.level x the mean forward time
};

// Computation migration (docs/migration.md; the simulator only): a helper rank computes equal slices of an
// owner's op. The link's bandwidth and latency come from a preset unless given; `custom` needs both.
struct MigrationConfig {
  bool enabled = false;
  std::vector<std::string> units = {"heads", "mlp", "vocab"};  // what may move: attention head groups, MLP
                                                               // column groups, LM-head vocabulary groups
  int slices = 0;                                              // equal slices per op; 0 = model.n_heads
  double max_fraction = 0.5;                                   // most of an op's slices one helper takes
  int helpers = 1;                                             // most helpers of one op (> 1: simulator only)
  std::string link = "infiniband";                             // nvlink | infiniband | custom
  double bandwidth_gbps = 0;                                   // 0 = the preset's
  double latency_us = -1;                                      // < 0 = the preset's
  int element_bytes = 0;              // bytes per tensor element moved; 0 = model.precision's (fp32 4, bf16 2)
  std::vector<std::string> force;     // "OWNER->HELPER:KINDS:SLICES" patterns that replace the decision
  std::string weights = "on_demand";  // on_demand | replicas (kept on replica_peers peers, refreshed per step)
  int replica_peers = 1;              // peers holding each rank's replicas
};

struct SchedulerConfig {
  std::string kind = "static";  // static
};

}  // namespace conductor::config
