#pragma once
// The trainer's memory on one rank, from the model's dimensions, before anything is allocated (the size guard
// of `conductor run`): parameters, gradients and AdamW's two moments (four fp32 copies) of the virtual stages
// the rank holds, plus one microbatch's activations (as model::StageModel lays them out) times the microbatches
// the schedule keeps in flight, plus a buffer for every cross-rank input the executor posts when a step starts
// (every one of the step: arrival, not the list, decides when an op runs) and MPI's record of each.
#include <cstdint>
#include <vector>

namespace conductor::runtime {

struct RankModelShape {
  int vocab = 256, seq_len = 64, d_model = 64, n_heads = 4, mlp_hidden = 256, microbatch_size = 4;
  std::vector<int> layers;       // per virtual stage held by the rank
  bool embedding = false;        // holds virtual stage 0 (token and position embeddings)
  bool head = false;             // holds the last virtual stage (final LayerNorm, LM head, loss)
  double in_flight = 1;          // peak microbatches whose activations are held (units of M_F)
  bool post_validation = false;  // schedule.post_validation: a rollback copy of weights, AdamW m and v, gradients
  double posted_inputs = 0;      // cross-rank inputs of the rank's list in one step (each a posted receive)
};

struct RankMemory {
  std::uint64_t parameters = 0;   // floats of the weights held
  std::uint64_t state_bytes = 0;  // weights, gradients, AdamW m and v (and their rollback copy)
  std::uint64_t activation_bytes = 0;
  std::uint64_t receive_bytes = 0;  // the posted receives' buffers (one microbatch's activation each) and requests
  std::uint64_t total() const { return state_bytes + activation_bytes + receive_bytes; }
};

RankMemory estimate_rank_memory(const RankModelShape& shape);

}  // namespace conductor::runtime
