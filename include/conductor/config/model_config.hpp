#pragma once
// Deck sections of the trainer: model shape, data, optimizer, checkpoints.
#include <string>
#include <vector>

namespace conductor::config {

struct ModelConfig {
  int vocab = 256;
  int seq_len = 64;
  int d_model = 64;
  int n_heads = 4;
  int n_layers = 4;
  int mlp_ratio = 4;
  unsigned long long init_seed = 42;
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | file
  std::string path;
};

struct OptimConfig {
  double lr = 3e-3;
};

struct CheckpointConfig {
  std::string path;
};

}  // namespace conductor::config
