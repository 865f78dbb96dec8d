#pragma once
// Deck sections of the trainer: model shape, data, optimizer, checkpoints.
#include <string>
#include <vector>

namespace conductor::config {

struct ModelConfig {
  std::string precision = "fp32";  // fp32 | bf16 (bf16 GEMM operands, fp32 master weights; cuda backend only)
  int vocab = 256;
  int seq_len = 64;
  int d_model = 64;
  int n_heads = 4;
  int n_layers = 4;
  int mlp_ratio = 4;
  unsigned long long init_seed = 42;
  // Transformer layers per virtual stage, in virtual-stage order (length p*v, sum n_layers); empty = even split.
  std::vector<int> layers_per_stage;
  // `layers_per_stage: balanced`: finalize_model computes the list (config::balanced_split) and stores it above.
  bool balance_layers = false;
};

struct DataConfig {
  std::string source = "synthetic";  // synthetic | file | llmc | megatron
  std::string path;                  // training data: a file, glob or (megatron) dataset prefix
  std::string valid_path;            // validation data, same format; empty: valid_fraction of path's tokens
  double valid_fraction = 0;         // tail of each training file held out for validation when valid_path is empty
};

struct EvalConfig {
  int every = 0;    // validation loss after every N steps (and the last); 0: never
  int batches = 4;  // validation microbatches per evaluation
};

struct OptimConfig {
  double lr = 6e-3;           // peak learning rate
  double lr_min_ratio = 0.1;  // cosine decay floor, as a fraction of lr
  int warmup_steps = 0;       // linear warm-up steps
  int decay_steps = 0;        // step at which cosine decay reaches the floor; 0 = run.steps
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;     // decoupled, applied to matrices and embeddings only
  double grad_clip = 1.0;        // max global gradient norm; 0 disables clipping
  int skip_nonfinite_steps = 0;  // steps with non-finite gradients skipped before giving up; 0 = stop at the first
};

struct CheckpointConfig {
  std::string path;    // checkpoint root: step folders, `latest` (model/checkpoint.hpp); "" = no checkpoints
  int every = 0;       // write every N steps (0 = only after the last step)
  int keep = 2;        // complete steps kept under path (0 = all)
  std::string resume;  // a checkpoint root (its `latest`) or a step folder; "" = start from the initialisation
  bool allow_data_change = false;  // resume although the data files differ from the checkpoint's record of them
};

}  // namespace conductor::config
