#pragma once
// The parts of StageModel shared by its sources (stage.cpp: parameters and buffers; stage_passes.cpp: F / B / W;
// optimizer.cpp: the update): one held virtual stage and one in-flight microbatch. Private to the model layer.
#include <memory>
#include <string>
#include <vector>

#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"

namespace conductor::model {

// One microbatch's buffers, carved out of two allocations (StageModel::layout_micro).
struct StageModel::Micro {
  DeviceBuffer floats, ints;
  std::vector<LayerActs> layers;
  std::vector<float*> res, dres;  // [L+1] residual stream and its gradient, each [B,T,C]
  int* tokens = nullptr;          // [B,T] (first stage)
  int* targets = nullptr;         // [B,T] (last stage)
  float* lnf = nullptr;           // [B,T,C]
  float* meanf = nullptr;         // [B,T]
  float* rstdf = nullptr;         // [B,T]
  float* logits = nullptr;        // [B,T,V]
  float* probs = nullptr;         // [B,T,V], becomes dlogits in B
  float* losses = nullptr;        // [B,T]
  float* dlnf = nullptr;          // [B,T,C]
  // LM-head vocabulary groups (stage_vocab.cpp): the whole vocabulary's per-token max logit and sum of
  // exponentials (F, for B and W; [B,T] each, backend memory), and per group whether this rank holds its logits (F)
  // and logit gradients (B), group g's compact [B,T,nv] block at B*T*(its first vocabulary id) in logits / probs.
  float* vocab_max = nullptr;
  float* vocab_sum = nullptr;
  std::vector<char> vocab_logits, vocab_dlogits;
};

struct StageModel::VStage {
  int vs = 0, first_layer = 0, n_layers = 0;
  bool embedding = false, head = false;
  std::vector<TensorInfo> tensors;
  std::size_t n_params = 0;
  DeviceBuffer params, grads, adam_m, adam_v;
  std::vector<LayerView> w, g;  // per layer, into params / grads
  std::size_t micro_floats = 0, micro_ints = 0;
  std::vector<std::unique_ptr<Micro>> active;  // per microbatch; null when not in flight
  std::vector<Phase> phase;                    // per microbatch
  std::vector<std::unique_ptr<Micro>> pool;    // released buffers, reused by the next F
  // Deterministic accumulation (stage_passes.cpp): W writes its microbatch's weight gradients into a zeroed slot
  // of its own; the slots are added to `grads` in microbatch order (a reorder buffer), so the sum is the same
  // whatever order W ran in. A slot holds n_params floats; one exists per W that ran ahead of an earlier
  // microbatch's W, plus the one in use, and they are reused across steps.
  struct GradSlot {
    DeviceBuffer buf;
    std::vector<LayerView> g;  // per layer, into buf
  };
  std::vector<std::unique_ptr<GradSlot>> waiting;     // per microbatch: its W ran, its slot is not yet added
  std::vector<std::unique_ptr<GradSlot>> free_slots;  // added slots, reused by the next W
  int next_to_add = 0;                                // the microbatch whose slot is added next
  // Computation migration (stage_migration.cpp), per microbatch: MLP groups a helper computes for its next W
  // (0: none), and the slot W held back until their gradients land.
  std::vector<int> groups_away;
  std::vector<std::unique_ptr<GradSlot>> held_back;
  std::size_t offset(const std::string& name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return t.offset;
    }
    throw Error("model: no tensor " + name);
  }
};

}  // namespace conductor::model
