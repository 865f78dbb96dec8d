// StageModel's passes over one virtual stage and microbatch: forward (F), backward_input (B), backward_weight (W),
// and the step's losses. See stage.hpp for the contract.
#include <algorithm>
#include <limits>
#include <vector>

#include "conductor/model/crossentropy.hpp"
#include "conductor/model/encoder.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"

namespace conductor::model {

void StageModel::begin_step(int step) {
  for (auto& s : stages_) {
    for (int mb = 0; mb < microbatches_; mb++) {
      if (s->phase[mb] != Phase::idle) {
        throw Error("model: begin_step(" + std::to_string(step) + ") while microbatch " + std::to_string(mb) +
                    " of virtual stage " + std::to_string(s->vs) + " is still in flight");
      }
    }
    backend_->zero(s->grads.get(), s->n_params * sizeof(float));
    for (auto& slot : s->waiting) {
      if (slot) s->free_slots.push_back(std::move(slot));  // a step left unfinished (tests): its slots are reused
    }
    s->waiting.clear();
    s->waiting.resize(static_cast<std::size_t>(microbatches_));
    for (auto& slot : s->held_back) {
      if (slot) s->free_slots.push_back(std::move(slot));  // the same for a helper's answer that never came
    }
    s->held_back.clear();
    s->groups_away.clear();
    s->next_to_add = 0;
  }
  step_ = step;
  std::fill(losses_.begin(), losses_.end(), std::numeric_limits<double>::quiet_NaN());
  std::fill(loss_pending_.begin(), loss_pending_.end(), 0);
  upload_step_tokens();
}

void StageModel::upload_step_tokens() {
  // All microbatches of the step in one upload each, at the step boundary: a per-forward upload from pageable
  // host memory may synchronise the device stream (CUDA), stalling the ops queued behind it.
  if (!step_tokens_.get() || tokens_step_ == step_) return;
  const std::size_t bt = dims_.BT();
  std::vector<int> inputs(static_cast<std::size_t>(microbatches_) * bt), targets(inputs.size());
  for (int mb = 0; mb < microbatches_; mb++) {
    data_.microbatch(step_, mb, host_inputs_, host_targets_);
    std::copy(host_inputs_.begin(), host_inputs_.end(), inputs.begin() + static_cast<std::ptrdiff_t>(mb * bt));
    std::copy(host_targets_.begin(), host_targets_.end(), targets.begin() + static_cast<std::ptrdiff_t>(mb * bt));
  }
  backend_->upload(step_tokens_.get(), inputs.data(), inputs.size() * sizeof(int));
  backend_->upload(step_targets_.get(), targets.data(), targets.size() * sizeof(int));
  tokens_step_ = step_;
}

// ------------------------------------------------------------------------------------------------ F
void StageModel::check_forward_args(const VStage& s, const float* in, const float* out) const {
  if (!s.embedding && !in) {
    throw Error("model: forward of virtual stage " + std::to_string(s.vs) + " needs an input tensor");
  }
  if (!s.head && !out)
    throw Error("model: forward of virtual stage " + std::to_string(s.vs) + " needs an output tensor");
}

// The layers of s on microbatch buffers m: tokens / targets are the microbatch's [B,T] ids on the backend (read
// on the embedding / head stage only). On the head stage m.losses holds the token losses afterwards.
void StageModel::run_forward(VStage& s, Micro& m, int* tokens, int* targets, const float* in, float* out) {
  const Dims& d = dims_;
  const std::size_t btc_bytes = activation_elements() * sizeof(float);
  if (s.embedding) {
    m.tokens = tokens;
    const float* p = s.params.f();
    encoder_forward(m.res[0], m.tokens, p + s.offset("wte"), p + s.offset("wpe"), d.B, d.T, d.C, *backend_);
  } else {
    backend_->copy(m.res[0], in, btc_bytes);
  }
  for (int l = 0; l < s.n_layers; l++) {
    if (mlp_groups_ > 1 || head_groups_ > 1) {  // the MLP and / or the attention in groups (stage_migration.cpp)
      layer_forward_grouped(m.layers[l], s.w[l]);
    } else {
      layer_forward(*backend_, m.layers[l], s.w[l], d);
    }
  }
  if (s.head) {
    m.targets = targets;
    if (vocab_groups_ > 1) {
      head_forward_vocab(s, m);  // in vocabulary groups (stage_vocab.cpp)
    } else {
      head_forward(s, m);
    }
  } else {
    backend_->copy(out, m.res[s.n_layers], btc_bytes);
  }
}

void StageModel::forward(int vs, int mb, const float* in, float* out) {
  VStage& s = stage(vs);
  check_forward_args(s, in, out);
  Micro& m = micro(s, mb, Phase::idle, "forward");
  if (s.embedding || s.head) upload_step_tokens();
  const std::size_t at = static_cast<std::size_t>(mb) * dims_.BT();
  run_forward(s, m, step_tokens_.i() + at, step_targets_.i() + at, in, out);
  give_groups_ = 0;  // given for this op only
  exchange_ = {};
  if (s.head) {
    // The token losses stay on the backend until someone asks (loss(), step_loss()): reading them here would
    // block the host on the device after every last-stage forward.
    backend_->copy(step_token_losses_.f() + at, m.losses, dims_.BT() * sizeof(float));
    loss_pending_[mb] = 1;
  }
  s.phase[mb] = Phase::after_forward;
}

double StageModel::eval_forward(int vs, int batch, const float* in, float* out) {
  VStage& s = stage(vs);
  check_forward_args(s, in, out);
  const std::size_t bt = dims_.BT();
  if ((s.embedding || s.head) && !eval_tokens_.get()) {
    eval_tokens_ = DeviceBuffer(*backend_, bt * sizeof(int));
    eval_targets_ = DeviceBuffer(*backend_, bt * sizeof(int));
  }
  if (s.embedding || s.head) {
    data_.valid_microbatch(batch, host_inputs_, host_targets_);
    backend_->upload(eval_tokens_.get(), host_inputs_.data(), bt * sizeof(int));
    backend_->upload(eval_targets_.get(), host_targets_.data(), bt * sizeof(int));
  }
  // Microbatch 0's buffers, idle between steps; given back at once, as a W would (no backward follows).
  Micro& m = micro(s, 0, Phase::idle, "eval_forward");
  run_forward(s, m, eval_tokens_.i(), eval_targets_.i(), in, out);
  double loss = std::numeric_limits<double>::quiet_NaN();
  if (s.head) {
    std::vector<float> host(bt);
    backend_->download(host.data(), m.losses, bt * sizeof(float));
    double sum = 0.0;
    for (float v : host) sum += v;
    loss = sum / static_cast<double>(bt);
  }
  s.pool.push_back(std::move(s.active[0]));
  return loss;
}

// Final LayerNorm, LM head and the token losses (m.losses) of the microbatch whose targets m.targets points to.
void StageModel::head_forward(VStage& s, Micro& m) {
  const Dims& d = dims_;
  const float* p = s.params.f();
  layernorm_forward(m.lnf, m.meanf, m.rstdf, m.res[s.n_layers], p + s.offset("lnf_w"), p + s.offset("lnf_b"), d.B, d.T,
                    d.C, *backend_);
  matmul_forward(m.logits, m.lnf, p + s.offset("lm_head_w"), nullptr, d.B, d.T, d.C, d.V, WeightLayout::out_in,
                 Accumulate::no, *backend_);
  crossentropy_forward(m.losses, m.probs, m.logits, m.targets, d.B, d.T, d.V, *backend_);
}

// ------------------------------------------------------------------------------------------------ B
void StageModel::backward_input(int vs, int mb, const float* grad_out, float* grad_in) {
  VStage& s = stage(vs);
  if (!s.head && !grad_out) {
    throw Error("model: backward_input of virtual stage " + std::to_string(vs) + " needs an output gradient");
  }
  if (!s.embedding && !grad_in) {
    throw Error("model: backward_input of virtual stage " + std::to_string(vs) + " needs an input-gradient tensor");
  }
  Micro& m = micro(s, mb, Phase::after_forward, "backward_input");
  const std::size_t btc_bytes = activation_elements() * sizeof(float);
  if (s.head && vocab_groups_ > 1) {
    head_backward_input_vocab(s, m);  // in vocabulary groups (stage_vocab.cpp)
  } else if (s.head) {
    head_backward_input(s, m);
  } else {
    backend_->copy(m.dres[s.n_layers], grad_out, btc_bytes);
  }
  for (int l = s.n_layers - 1; l >= 0; l--) {
    if (mlp_groups_ > 1 || head_groups_ > 1) {  // the MLP and / or the attention in groups (stage_migration.cpp)
      layer_backward_input_grouped(m.layers[l], s.w[l]);
    } else {
      layer_backward_input(*backend_, m.layers[l], s.w[l], dims_);
    }
  }
  give_groups_ = 0;
  exchange_ = {};
  if (!s.embedding) backend_->copy(grad_in, m.dres[0], btc_bytes);
  s.phase[mb] = Phase::after_backward_input;
}

// Gradient of the loss through the LM head and the final LayerNorm into the residual stream's last entry.
void StageModel::head_backward_input(VStage& s, Micro& m) {
  const Dims& d = dims_;
  const int L = s.n_layers;
  const float* p = s.params.f();
  // d(loss)/d(token loss), with loss = (1/m) sum over microbatches of the mean over its B*T tokens.
  const float dloss = 1.0f / (static_cast<float>(microbatches_) * static_cast<float>(d.BT()));
  crossentropy_backward(m.probs, m.probs, m.targets, dloss, d.B, d.T, d.V, *backend_);
  matmul_backward_input(m.dlnf, m.probs, p + s.offset("lm_head_w"), d.B, d.T, d.C, d.V, WeightLayout::out_in,
                        Accumulate::no, *backend_);
  backend_->zero(m.dres[L], activation_elements() * sizeof(float));
  layernorm_backward_input(m.dres[L], m.dlnf, m.res[L], p + s.offset("lnf_w"), m.meanf, m.rstdf, d.B, d.T, d.C,
                           *backend_);
}

// ------------------------------------------------------------------------------------------------ W
namespace {

// The view `v` of the buffer at `from`, moved onto the buffer at `to` (same layout).
LayerView rebased(const LayerView& v, const float* from, float* to) {
  const auto move = [&](float* p) { return to + (p - from); };
  LayerView r;
  r.ln1_w = move(v.ln1_w);
  r.ln1_b = move(v.ln1_b);
  r.qkv_w = move(v.qkv_w);
  r.qkv_b = move(v.qkv_b);
  r.proj_w = move(v.proj_w);
  r.proj_b = move(v.proj_b);
  r.ln2_w = move(v.ln2_w);
  r.ln2_b = move(v.ln2_b);
  r.fc_w = move(v.fc_w);
  r.fc_b = move(v.fc_b);
  r.fcproj_w = move(v.fcproj_w);
  r.fcproj_b = move(v.fcproj_b);
  return r;
}

std::unique_ptr<StageModel::VStage::GradSlot> take_grad_slot(StageModel::VStage& s, Backend& backend) {
  std::unique_ptr<StageModel::VStage::GradSlot> slot;
  if (!s.free_slots.empty()) {
    slot = std::move(s.free_slots.back());
    s.free_slots.pop_back();
  } else {
    slot = std::make_unique<StageModel::VStage::GradSlot>();
    slot->buf = DeviceBuffer(backend, s.n_params * sizeof(float));
    for (const LayerView& v : s.g) slot->g.push_back(rebased(v, s.grads.f(), slot->buf.f()));
  }
  backend.zero(slot->buf.get(), s.n_params * sizeof(float));
  return slot;
}

}  // namespace

void StageModel::backward_weight(int vs, int mb) {
  VStage& s = stage(vs);
  Micro& m = micro(s, mb, Phase::after_backward_input, "backward_weight");
  const Dims& d = dims_;
  const int L = s.n_layers;
  std::unique_ptr<VStage::GradSlot> slot = take_grad_slot(s, *backend_);
  float* g = slot->buf.f();
  const std::size_t i = static_cast<std::size_t>(mb);
  const int away = i < s.groups_away.size() ? s.groups_away[i] : 0;  // groups a helper computes
  if (s.head && vocab_groups_ > 1) {
    head_backward_weight_vocab(s, m, g, vocab_groups_ - away);  // in vocabulary groups (stage_vocab.cpp)
  } else if (s.head) {
    matmul_backward_weight(g + s.offset("lm_head_w"), nullptr, m.probs, m.lnf, d.B, d.T, d.C, d.V, WeightLayout::out_in,
                           *backend_);
    layernorm_backward_weight(g + s.offset("lnf_w"), g + s.offset("lnf_b"), m.dlnf, m.res[L], m.meanf, m.rstdf, d.B,
                              d.T, d.C, *backend_);
  }
  for (int l = L - 1; l >= 0; l--) {
    const LayerActs& a = m.layers[l];
    const LayerView& gl = slot->g[l];
    if (mlp_groups_ == 1 && head_groups_ == 1) {
      layer_backward_weight(*backend_, a, gl, d);
      continue;
    }
    // In groups (stage_migration.cpp): the units migration may move, less those a helper computes.
    if (mlp_groups_ > 1) {
      mlp_groups_backward_weight(a, gl, mlp_groups_ - away);
    } else {
      mlp_slice_backward_weight(*backend_, gl, a.mlp, a.ln2, a.dout, d, 0, d.F);
    }
    if (head_groups_ > 1) {
      head_groups_backward_weight(a, gl, head_groups_ - away);
    } else {
      attention_slice_backward_weight(*backend_, gl, a.attn, a.ln1, a.dx2, d, 0, d.NH);
    }
    layer_backward_weight_norms(*backend_, a, gl, d);
  }
  if (s.embedding) {
    encoder_backward(g + s.offset("wte"), g + s.offset("wpe"), m.dres[0], m.tokens, d.B, d.T, d.C, *backend_);
  }
  s.pool.push_back(std::move(s.active[mb]));
  s.phase[mb] = Phase::idle;
  if (away > 0) {  // the helper's groups land later (land_weight_grads), then the slot joins the sum
    s.held_back.resize(static_cast<std::size_t>(microbatches_));
    s.held_back[i] = std::move(slot);
    return;
  }
  s.waiting[mb] = std::move(slot);
  add_slots_in_order(s);
}

// Adds every slot that is next in microbatch order: the float sum is (((0 + g0) + g1) + g2) ... on every rank,
// schedule and execution mode, so losses and weights do not depend on the order W ran in.
void StageModel::add_slots_in_order(VStage& s) {
  while (s.next_to_add < microbatches_ && s.waiting[s.next_to_add]) {
    std::unique_ptr<VStage::GradSlot> next = std::move(s.waiting[s.next_to_add]);
    residual_forward(s.grads.f(), s.grads.f(), next->buf.f(), s.n_params, *backend_);
    s.free_slots.push_back(std::move(next));
    s.next_to_add++;
  }
}

void StageModel::backward_full(int vs, int mb, const float* grad_out, float* grad_in) {
  backward_input(vs, mb, grad_out, grad_in);
  backward_weight(vs, mb);
}

// ------------------------------------------------------------------------------------------------ losses
double StageModel::loss(int mb) const {
  if (!holds(num_vs_ - 1)) throw Error("model: loss() is only known on the rank holding the last virtual stage");
  if (mb < 0 || mb >= microbatches_) throw Error("model: loss of microbatch " + std::to_string(mb) + " out of range");
  fetch_losses();
  return losses_[mb];
}

void StageModel::fetch_losses() const {
  if (std::find(loss_pending_.begin(), loss_pending_.end(), 1) == loss_pending_.end()) return;
  const std::size_t bt = dims_.BT();
  std::vector<float> host(static_cast<std::size_t>(microbatches_) * bt);
  backend_->download(host.data(), step_token_losses_.get(), host.size() * sizeof(float));
  for (int mb = 0; mb < microbatches_; mb++) {
    if (!loss_pending_[mb]) continue;
    double sum = 0.0;
    for (std::size_t i = 0; i < bt; i++) sum += host[static_cast<std::size_t>(mb) * bt + i];
    losses_[mb] = sum / static_cast<double>(bt);
    loss_pending_[mb] = 0;
  }
}

double StageModel::step_loss() const {
  double sum = 0.0;
  for (int mb = 0; mb < microbatches_; mb++) sum += loss(mb);
  return sum / microbatches_;
}

}  // namespace conductor::model
