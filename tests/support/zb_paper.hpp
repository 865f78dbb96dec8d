#pragma once
// The Zero Bubble paper's schedule-efficiency figures (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024,
// arXiv 2401.10241): Table 9's profiled T_F, T_B, T_W, T_comm (ms, uniform over stages) and Table 5's bubble
// rates of the authors' heuristic (sail-sg/zero-bubble-pipeline-parallelism) for ZB-1p (activation memory
// limited to p M_B, 1F1B's) and ZB-2p (2p M_B). Bubble rate = (cost - m (T_F + T_B + T_W)) / cost, cost = the
// longest stage's span (its first F's start to its last W's end). Shared by bench_sim --zb-table and the
// sched_zb_table test.
#include <array>

namespace conductor::test_support {

struct ZbPaperConfig {
  const char* model;
  int p, m;
  double f, b, w, comm;  // Table 9
  double zb1p, zb2p;     // Table 5
};

inline const std::array<ZbPaperConfig, 12>& zb_paper_configs() {
  static const std::array<ZbPaperConfig, 12> configs = {{
      {"1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 0.1585, 0.0433},
      {"1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 0.1242, 0.0039},
      {"1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 0.0674, 0.0026},
      {"6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 0.1323, 0.0029},
      {"6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 0.1045, 0.0022},
      {"6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 0.0554, 0.0010},
      {"14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 0.1397, 0.0066},
      {"14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 0.1088, 0.0054},
      {"14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 0.0576, 0.0028},
      {"28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 0.1421, 0.0038},
      {"28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 0.1106, 0.0029},
      {"28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 0.0594, 0.0018},
  }};
  return configs;
}

}  // namespace conductor::test_support
