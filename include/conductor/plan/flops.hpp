#pragma once
// Model FLOPs of one training step, the numerator of MFU: the matmuls of forward and backward (backward = 2x
// forward: input and weight gradients), no recomputation, no elementwise work. Per layer and token, forward:
// 2 x (4 h^2 attention projections + 2 mlp_ratio h^2 MLP) + 4 s h for the attention scores and their
// weighted sum (QK^T and AV, no causal halving); the LM head 2 h V per token: the cost model's per-layer work
// (config::stage_work_from_model, costs_from_model) for any mlp_ratio; with 4, the usual 6 N + 12 L h s per token.
#include "conductor/plan/plan.hpp"

namespace conductor::plan {

// Forward FLOPs per token: one layer's matmuls (attention projections and MLP), its attention (scores and
// weighted sum), the LM head. The cost model (config::costs_from_model, the balanced split) and MFU both use these.
inline double layer_matmul_flops_per_token(const ModelDims& m) {
  const double h = m.d_model;
  return 2.0 * (4.0 + 2.0 * m.mlp_ratio) * h * h;
}
inline double layer_attention_flops_per_token(const ModelDims& m) { return 4.0 * m.seq_len * m.d_model; }
inline double head_flops_per_token(const ModelDims& m) { return 2.0 * m.d_model * m.vocab; }

inline double model_flops_per_step(const ModelDims& m, const Pipeline& p) {
  const double tokens = static_cast<double>(p.m) * p.microbatch_size * m.seq_len;
  const double layer_forward = layer_matmul_flops_per_token(m) + layer_attention_flops_per_token(m);
  return 3.0 * tokens * (m.n_layers * layer_forward + head_flops_per_token(m));
}

// Tokens a step trains on.
inline double tokens_per_step(const ModelDims& m, const Pipeline& p) {
  return static_cast<double>(p.m) * p.microbatch_size * m.seq_len;
}

}  // namespace conductor::plan
