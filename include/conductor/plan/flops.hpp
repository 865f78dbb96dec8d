#pragma once
// Two FLOP counts, each with one home:
// - The cost model's forward work per token (config::costs_from_model, stage_work_from_model, the balanced
//   split): one layer's matmuls 2 x (4 h^2 attention projections + 2 mlp_ratio h^2 MLP), its attention 4 s h
//   (QK^T and AV over the whole square: what the simulator's relative stage costs were calibrated with), the LM
//   head 2 h V. Backward is twice forward (input and weight gradients).
// - Model FLOPs of one training step, the numerator of MFU, as llm.c counts them (gpt2_estimate_mfu, after Kaplan
//   et al. 2020, section 2.1): 6 N + 6 L C T per token, L layers, C = d_model, T = seq_len, and N the parameters a
//   token's matmuls multiply by: every weight and bias of the layers, the LayerNorms, the position embedding
//   (small terms counted as llm.c counts them) and the LM head's V x C, but not the token embedding table. llm.c
//   ties the two, so its N holds V x C once; this model's LM head is untied (its own V x C weights beside wte),
//   and the lookup in wte multiplies nothing, so N is the model's parameter count less V x C (mfu_parameter_count).
//   6 N is forward (2 N) plus backward (input and weight gradients, 4 N) of the weight matmuls; 6 L C T the
//   attention scores and their weighted sum (QK^T, AV: 2 x 2 T C per token forward, halved by the causal mask,
//   times 3 for training). No recomputation, no elementwise work.
#include "conductor/plan/plan.hpp"

namespace conductor::plan {

// A layer's matmuls split by unit (migration's attention head groups and MLP column groups, docs/migration.md):
// the attention projections (QKV and output, 4 h^2 weights) and the MLP (fc1 and fc2, 2 mlp_ratio h^2).
inline double layer_projection_flops_per_token(const ModelDims& m) {
  const double h = m.d_model;
  return 2.0 * 4.0 * h * h;
}
inline double layer_mlp_flops_per_token(const ModelDims& m) {
  const double h = m.d_model;
  return 2.0 * 2.0 * m.mlp_ratio * h * h;
}
inline double layer_matmul_flops_per_token(const ModelDims& m) {
  const double h = m.d_model;
  return 2.0 * (4.0 + 2.0 * m.mlp_ratio) * h * h;
}
inline double layer_attention_flops_per_token(const ModelDims& m) { return 4.0 * m.seq_len * m.d_model; }
inline double head_flops_per_token(const ModelDims& m) { return 2.0 * m.d_model * m.vocab; }

// N of MFU's 6 N (above): the whole model's parameters (GPT-2 layout: biases, two LayerNorms per layer, a final
// LayerNorm, the untied LM head) less the token embedding table.
inline double mfu_parameter_count(const ModelDims& m) {
  const double c = m.d_model, f = static_cast<double>(m.mlp_ratio) * m.d_model;
  const double layer = (3 * c * c + 3 * c) + (c * c + c) + (c * f + f) + (f * c + c) + 2 * (2 * c);
  return static_cast<double>(m.vocab) * c + static_cast<double>(m.seq_len) * c + m.n_layers * layer + 2 * c;
}

inline double model_flops_per_token(const ModelDims& m) {
  return 6.0 * mfu_parameter_count(m) + 6.0 * m.n_layers * static_cast<double>(m.d_model) * m.seq_len;
}

// Tokens a step trains on.
inline double tokens_per_step(const ModelDims& m, const Pipeline& p) {
  return static_cast<double>(p.m) * p.microbatch_size * m.seq_len;
}

inline double model_flops_per_step(const ModelDims& m, const Pipeline& p) {
  return tokens_per_step(m, p) * model_flops_per_token(m);
}

}  // namespace conductor::plan
