#include "conductor/runtime/memory_estimate.hpp"

namespace conductor::runtime {

namespace {

// MPI's own bytes per posted receive (its request and matching entry): an estimate, a few hundred bytes in Open
// MPI, rounded up.
constexpr std::uint64_t kRequestBytes = 1024;
constexpr std::uint64_t kCopies = 4;  // weights, gradients, AdamW m, AdamW v (fp32 each)
constexpr std::uint64_t kRollbackCopies =
    4;  // post-validation's copy of weights, m, v, gradients (StageModel::keep_backup)

std::uint64_t layer_parameters(std::uint64_t C, std::uint64_t F) {
  return 4 * C /* ln1, ln2 */ + 3 * C * C + 3 * C /* qkv */ + C * C + C /* proj */ + 2 * F * C + F + C /* mlp */;
}

// Floats of one layer's activations for one microbatch, as StageModel::layout_micro carves them: residual
// stream and its gradient, LayerNorm outputs and statistics, q/k/v and their gradients, the attention's per-row
// log-sum-exp (the fused attention keeps no [T,T] weights), MLP hidden (pre- and post-GELU, and its gradient).
std::uint64_t layer_activation_floats(std::uint64_t BT, std::uint64_t C, std::uint64_t F, std::uint64_t heads_bt) {
  return 2 * BT * C + 13 * BT * C + 4 * BT + heads_bt + 3 * BT * F;
}

}  // namespace

RankMemory estimate_rank_memory(const RankModelShape& s) {
  const std::uint64_t C = static_cast<std::uint64_t>(s.d_model), F = static_cast<std::uint64_t>(s.mlp_hidden);
  const std::uint64_t V = static_cast<std::uint64_t>(s.vocab), T = static_cast<std::uint64_t>(s.seq_len);
  const std::uint64_t BT = static_cast<std::uint64_t>(s.microbatch_size) * T;
  const std::uint64_t att = BT * static_cast<std::uint64_t>(s.n_heads);
  RankMemory r;
  std::uint64_t act_floats = 0;
  for (int layers : s.layers) {
    const auto L = static_cast<std::uint64_t>(layers);
    r.parameters += L * layer_parameters(C, F);
    act_floats += L * layer_activation_floats(BT, C, F, att) + 2 * BT * C;
  }
  if (s.embedding) {
    r.parameters += V * C + T * C;
    act_floats += BT;  // tokens
  }
  if (s.head) {
    r.parameters += 2 * C + V * C;
    act_floats += 2 * BT * C + 3 * BT + 2 * BT * V + BT;  // final LayerNorm, logits, probabilities, targets
  }
  r.state_bytes = (kCopies + (s.post_validation ? kRollbackCopies : 0)) * r.parameters * sizeof(float);
  r.activation_bytes = static_cast<std::uint64_t>(s.in_flight * static_cast<double>(act_floats * sizeof(float)));
  r.receive_bytes =
      static_cast<std::uint64_t>(s.posted_inputs * static_cast<double>(BT * C * sizeof(float) + kRequestBytes));
  return r;
}

}  // namespace conductor::runtime
