// StageModel's part of computation migration (stage.hpp, "computation migration"): W's MLP weight gradients in
// column groups, what a helper needs for some of them, the helper's computation and the landing of its answer.
//
// Why groups even where nothing moves: a product split by columns does not give the bits of the whole product
// (BLAS blocks differently), so every W of a run with migration on computes the MLP's weight gradients group
// by group from compact copies of the group's columns, on whichever rank. A group's gradients are accumulated
// into zeroed blocks (W's slot is zeroed per microbatch; a helper zeroes its own), so a helper's answer copied
// into the slot is the bits the owner would have computed.
#include <algorithm>
#include <cstring>

#include "conductor/model/block.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"

namespace conductor::model {

namespace {

// Floats of one group's gradients (fc_w, fc_b, fcproj_w; fcproj_b for the group at column 0).
std::size_t group_grad_floats(const Dims& d, int c0, int nc) {
  return 2 * static_cast<std::size_t>(nc) * d.C + static_cast<std::size_t>(nc) + (c0 == 0 ? d.C : 0);
}

// Copies columns [c0, c0 + nc) of the [BT, F] buffer src into the compact [BT, nc] buffer dst (backend memory).
void gather_columns(Backend& be, float* dst, const float* src, const Dims& d, int c0, int nc) {
  for (long r = 0; r < d.BT(); ++r) {
    be.copy(dst + r * nc, src + r * d.F + c0, static_cast<std::size_t>(nc) * sizeof(float));
  }
}

}  // namespace

void StageModel::mlp_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here) {
  const Dims& d = dims_;
  for (int k = 0; k < groups_here; ++k) {
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    gather_columns(*backend_, group_gelu_.f(), a.mlp.gelu, d, c0, nc);
    gather_columns(*backend_, group_dh_.f(), a.mlp.dh, d, c0, nc);
    MlpSliceBuffers buf;
    buf.gelu = group_gelu_.f();
    buf.dh = group_dh_.f();
    mlp_group_backward_weight(*backend_, mlp_group_grads(g, d, c0, c0 + nc), buf, a.ln2, a.dout, d, nc);
  }
}

std::vector<float> StageModel::mlp_weight_inputs(int vs, int mb, int groups) {
  VStage& s = stage(vs);
  if (groups < 1 || groups > mlp_groups_) {
    throw Error("model: " + std::to_string(groups) + " MLP groups asked of virtual stage " + std::to_string(vs) +
                " (it has " + std::to_string(mlp_groups_) + ")");
  }
  Micro& m = micro(s, mb, Phase::after_backward_input, "mlp_weight_inputs");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = mlp_groups_ - groups, c_first = group_begin(first);
  const std::size_t away = static_cast<std::size_t>(d.F - c_first) * d.BT();
  std::vector<float> out(static_cast<std::size_t>(s.n_layers) * (2 * btc + 2 * away));
  float* at = out.data();
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerActs& a = m.layers[l];
    backend_->download(at, a.ln2, btc * sizeof(float));
    backend_->download(at + btc, a.dout, btc * sizeof(float));
    at += 2 * btc;
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      for (const float* src : {a.mlp.gelu, a.mlp.dh}) {
        for (long r = 0; r < d.BT(); ++r) {
          backend_->download(at + r * nc, src + r * d.F + c0, static_cast<std::size_t>(nc) * sizeof(float));
        }
        at += static_cast<std::size_t>(nc) * d.BT();
      }
    }
  }
  s.groups_away.resize(static_cast<std::size_t>(microbatches_), 0);
  s.groups_away[static_cast<std::size_t>(mb)] = groups;
  return out;
}

std::size_t StageModel::mlp_weight_grads_floats(int vs, int groups) const {
  std::size_t per_layer = 0;
  for (int k = mlp_groups_ - groups; k < mlp_groups_; ++k) {
    per_layer += group_grad_floats(dims_, group_begin(k), group_begin(k + 1) - group_begin(k));
  }
  return static_cast<std::size_t>(stage(vs).n_layers) * per_layer;
}

std::vector<float> StageModel::mlp_weight_grads(int groups, const std::vector<float>& inputs) const {
  const Dims& d = dims_;
  if (groups < 1 || groups > mlp_groups_) {
    throw Error("model: " + std::to_string(groups) + " MLP groups asked of a helper (the model has " +
                std::to_string(mlp_groups_) + ")");
  }
  const int first = mlp_groups_ - groups;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const std::size_t in_layer = 2 * btc + 2 * static_cast<std::size_t>(d.F - group_begin(first)) * d.BT();
  if (inputs.empty() || inputs.size() % in_layer != 0) {
    throw Error("model: a helper's MLP weight-gradient input of " + std::to_string(inputs.size()) +
                " floats is not a whole number of layers of " + std::to_string(in_layer));
  }
  const std::size_t layers = inputs.size() / in_layer;
  std::size_t out_layer = 0;
  for (int k = first; k < mlp_groups_; ++k) {
    out_layer += group_grad_floats(d, group_begin(k), group_begin(k + 1) - group_begin(k));
  }
  std::vector<float> out(layers * out_layer, 0.0f);  // zeroed, as W's slot is
  const float* in = inputs.data();
  float* at = out.data();
  for (std::size_t l = 0; l < layers; ++l) {
    const float* ln2 = in;
    const float* dout = in + btc;
    in += 2 * btc;
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const std::size_t cols = static_cast<std::size_t>(nc) * d.BT();
      MlpSliceBuffers buf;
      buf.gelu = const_cast<float*>(in);  // read only: W reads the GELU output and the pre-activation gradient
      buf.dh = const_cast<float*>(in + cols);
      in += 2 * cols;
      MlpGroupGrads g;
      g.fc_w = at;
      g.fc_b = at + static_cast<std::size_t>(nc) * d.C;
      g.fcproj_w = g.fc_b + nc;
      g.fcproj_b = c0 == 0 ? g.fcproj_w + static_cast<std::size_t>(nc) * d.C : nullptr;
      // The helper's model is on the cpu backend (host memory); migration runs on no other.
      mlp_group_backward_weight(*backend_, g, buf, ln2, dout, d, nc);
      at += group_grad_floats(d, c0, nc);
    }
  }
  return out;
}

void StageModel::land_mlp_weight_grads(int vs, int mb, const std::vector<float>& grads) {
  VStage& s = stage(vs);
  const std::size_t i = static_cast<std::size_t>(mb);
  if (i >= s.held_back.size() || !s.held_back[i]) {
    throw Error("model: MLP weight gradients for microbatch " + std::to_string(mb) + " of virtual stage " +
                std::to_string(vs) + " landed, but its W held nothing back");
  }
  const int groups = s.groups_away[i];
  if (grads.size() != mlp_weight_grads_floats(vs, groups)) {
    throw Error("model: a helper's answer of " + std::to_string(grads.size()) + " floats for microbatch " +
                std::to_string(mb) + " of virtual stage " + std::to_string(vs) + " (expected " +
                std::to_string(mlp_weight_grads_floats(vs, groups)) + ")");
  }
  const Dims& d = dims_;
  const float* at = grads.data();
  for (int l = 0; l < s.n_layers; ++l) {
    for (int k = mlp_groups_ - groups; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const MlpGroupGrads g = mlp_group_grads(s.held_back[i]->g[static_cast<std::size_t>(l)], d, c0, c0 + nc);
      const std::size_t w = static_cast<std::size_t>(nc) * d.C;
      backend_->upload(g.fc_w, at, w * sizeof(float));
      backend_->upload(g.fc_b, at + w, static_cast<std::size_t>(nc) * sizeof(float));
      backend_->upload(g.fcproj_w, at + w + nc, w * sizeof(float));
      if (g.fcproj_b) backend_->upload(g.fcproj_b, at + 2 * w + nc, static_cast<std::size_t>(d.C) * sizeof(float));
      at += group_grad_floats(d, c0, nc);
    }
  }
  s.groups_away[i] = 0;
  s.waiting[i] = std::move(s.held_back[i]);
  add_slots_in_order(s);
}

}  // namespace conductor::model
