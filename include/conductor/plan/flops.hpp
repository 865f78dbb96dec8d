#pragma once
// Model FLOPs of one training step, the numerator of MFU: the matmuls of forward and backward (backward = 2x
// forward: input and weight gradients), no recomputation, no elementwise work. Per layer and token, forward:
// 2 x (4 h^2 attention projections + 2 mlp_ratio h^2 MLP) + 4 s h for the attention scores and their
// weighted sum (QK^T and AV, no causal halving); the LM head 2 h V per token. With mlp_ratio 4 this is the cost
// model's per-layer work (config::stage_work_from_model), the usual 6 N + 12 L h s per token.
#include "conductor/plan/plan.hpp"

namespace conductor::plan {

inline double model_flops_per_step(const ModelDims& m, const Pipeline& p) {
  const double h = m.d_model, s = m.seq_len;
  const double tokens = static_cast<double>(p.m) * p.microbatch_size * s;
  const double layer_forward = 2.0 * (4.0 + 2.0 * m.mlp_ratio) * h * h + 4.0 * s * h;
  const double head_forward = 2.0 * h * m.vocab;
  return 3.0 * tokens * (m.n_layers * layer_forward + head_forward);
}

// Tokens a step trains on.
inline double tokens_per_step(const ModelDims& m, const Pipeline& p) {
  return static_cast<double>(p.m) * p.microbatch_size * m.seq_len;
}

}  // namespace conductor::plan
