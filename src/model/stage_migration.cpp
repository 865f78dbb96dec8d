// StageModel's part of computation migration (stage.hpp, "computation migration"): the MLP of F, B and W in column
// groups, what a helper needs for some of them, the helper's computation and the landing of its answer.
//
// Why groups even where nothing moves: a product split by columns does not give the bits of the whole product
// (BLAS blocks differently), so every W of a run with migration on computes the MLP's weight gradients group
// by group from compact copies of the group's columns, on whichever rank. A group's gradients are accumulated
// into zeroed blocks (W's slot is zeroed per microbatch; a helper zeroes its own), so a helper's answer copied
// into the slot is the bits the owner would have computed. F and B likewise compute each group on compact buffers
// of their own (fresh allocations on both sides, so the elementwise GELU kernels see the same layout) and add the
// groups' partial sums in one order, from the last group down: a helper holds the last groups, so its answer is a
// prefix of that sum.
#include <algorithm>
#include <cstring>

#include "conductor/model/block.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/matmul.hpp"
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

// Scatters the compact [BT, nc] buffer src into columns [c0, c0 + nc) of the [BT, F] buffer dst.
void scatter_columns(Backend& be, float* dst, const float* src, const Dims& d, int c0, int nc) {
  for (long r = 0; r < d.BT(); ++r) {
    be.copy(dst + r * d.F + c0, src + r * nc, static_cast<std::size_t>(nc) * sizeof(float));
  }
}

// One group's F: pre-activation h, GELU output and its partial output p [BT, C] (fcproj_b: group 0's, else null).
// Owner and helper run exactly this on compact buffers of their own, so a group's bits do not depend on the rank.
void group_forward(Backend& be, float* p, float* h, float* gelu, const float* ln2, const float* fc_w, const float* fc_b,
                   const float* fcproj_w, const float* fcproj_b, const Dims& d, int nc) {
  matmul_forward(h, ln2, fc_w, fc_b, d.B, d.T, d.C, nc, WeightLayout::out_in, Accumulate::no, be);
  gelu_forward(gelu, h, static_cast<std::size_t>(d.BT()) * nc, be);
  matmul_forward(p, gelu, fcproj_w, fcproj_b, d.B, d.T, nc, d.C, WeightLayout::in_out, Accumulate::no, be);
}

// One group's B: its pre-activation gradient dh [BT, nc] (from h) and its partial LN2-output gradient q [BT, C].
void group_backward_input(Backend& be, float* q, float* dh, const float* h, const float* dout, const float* fcproj_w,
                          const float* fc_w, const Dims& d, int nc) {
  matmul_backward_input(dh, dout, fcproj_w, d.B, d.T, nc, d.C, WeightLayout::in_out, Accumulate::no, be);
  gelu_backward(dh, dh, h, static_cast<std::size_t>(d.BT()) * nc, be);
  matmul_backward_input(q, dh, fc_w, d.B, d.T, d.C, nc, WeightLayout::out_in, Accumulate::no, be);
}

// acc = parts[k] + acc for k = last .. 0: the groups' fixed order of addition (stage.hpp).
void add_down(Backend& be, float* acc, const float* parts, int last, std::size_t n) {
  for (int k = last; k >= 0; --k) residual_forward(acc, parts + static_cast<std::size_t>(k) * n, acc, n, be);
}

}  // namespace

void StageModel::check_groups(int groups, const char* what) const {
  if (groups < 1 || groups > mlp_groups_) {
    throw Error(std::string("model: ") + std::to_string(groups) + " MLP groups asked for " + what + " (the model has " +
                std::to_string(mlp_groups_) + ")");
  }
}

void StageModel::give_mlp_groups(int groups, MlpExchange exchange) {
  check_groups(groups, "an owner's F or B");
  give_groups_ = groups;
  exchange_ = std::move(exchange);
}

// F of one layer's MLP in groups: out = x2 + (p[0] + (p[1] + ... + p[G-1])), the last give_groups_ groups' sum
// from the helper. The owner computes its groups while the helper computes the others.
void StageModel::mlp_forward_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = mlp_groups_ - give_groups_;  // the first group a helper computes
  if (give_groups_ > 0) {
    std::vector<float> in(btc);
    backend_->download(in.data(), a.ln2, btc * sizeof(float));
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const std::size_t wn = static_cast<std::size_t>(nc) * d.C;
      const std::size_t at = in.size();
      in.resize(at + 2 * wn + nc + (c0 == 0 ? d.C : 0));
      backend_->download(in.data() + at, w.fc_w + static_cast<std::size_t>(c0) * d.C, wn * sizeof(float));
      backend_->download(in.data() + at + wn, w.fc_b + c0, static_cast<std::size_t>(nc) * sizeof(float));
      backend_->download(in.data() + at + wn + nc, w.fcproj_w + static_cast<std::size_t>(c0) * d.C, wn * sizeof(float));
      if (c0 == 0) backend_->download(in.data() + at + 2 * wn + nc, w.fcproj_b, d.C * sizeof(float));
    }
    exchange_.send(std::move(in), btc + 2 * static_cast<std::size_t>(d.F - group_begin(first)) * d.BT());
  }
  float* parts = group_parts_.f();
  for (int k = 0; k < first; ++k) {
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    group_forward(*backend_, parts + k * btc, group_h_.f(), group_gelu_.f(), a.ln2,
                  w.fc_w + static_cast<long>(c0) * d.C, w.fc_b + c0, w.fcproj_w + static_cast<long>(c0) * d.C,
                  c0 == 0 ? w.fcproj_b : nullptr, d, nc);
    scatter_columns(*backend_, a.mlp.h, group_h_.f(), d, c0, nc);
    scatter_columns(*backend_, a.mlp.gelu, group_gelu_.f(), d, c0, nc);
  }
  int last = first - 1;  // the highest group not yet in a.out
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    backend_->upload(a.out, answer.data(), btc * sizeof(float));
    const float* at = answer.data() + btc;
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const std::size_t cols = static_cast<std::size_t>(nc) * d.BT();
      backend_->upload(group_h_.f(), at, cols * sizeof(float));
      backend_->upload(group_gelu_.f(), at + cols, cols * sizeof(float));
      scatter_columns(*backend_, a.mlp.h, group_h_.f(), d, c0, nc);
      scatter_columns(*backend_, a.mlp.gelu, group_gelu_.f(), d, c0, nc);
      at += 2 * cols;
    }
  } else {
    backend_->copy(a.out, parts + static_cast<std::size_t>(last) * btc, btc * sizeof(float));
    --last;
  }
  add_down(*backend_, a.out, parts, last, btc);
  residual_forward(a.out, a.x2, a.out, btc, *backend_);
}

// B of one layer's MLP in groups: dln2 = q[0] + (q[1] + ... + q[G-1]); each group's dh lands in a.mlp.dh for W.
void StageModel::mlp_backward_input_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = mlp_groups_ - give_groups_;
  if (give_groups_ > 0) {
    std::vector<float> in(btc);
    backend_->download(in.data(), a.dout, btc * sizeof(float));
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const std::size_t wn = static_cast<std::size_t>(nc) * d.C, cols = static_cast<std::size_t>(nc) * d.BT();
      const std::size_t at = in.size();
      in.resize(at + 2 * wn + cols);
      backend_->download(in.data() + at, w.fcproj_w + static_cast<std::size_t>(c0) * d.C, wn * sizeof(float));
      backend_->download(in.data() + at + wn, w.fc_w + static_cast<std::size_t>(c0) * d.C, wn * sizeof(float));
      for (long r = 0; r < d.BT(); ++r) {
        backend_->download(in.data() + at + 2 * wn + r * nc, a.mlp.h + r * d.F + c0, nc * sizeof(float));
      }
    }
    exchange_.send(std::move(in), btc + static_cast<std::size_t>(d.F - group_begin(first)) * d.BT());
  }
  float* parts = group_parts_.f();
  for (int k = 0; k < first; ++k) {
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    gather_columns(*backend_, group_h_.f(), a.mlp.h, d, c0, nc);
    group_backward_input(*backend_, parts + k * btc, group_dh_.f(), group_h_.f(), a.dout,
                         w.fcproj_w + static_cast<long>(c0) * d.C, w.fc_w + static_cast<long>(c0) * d.C, d, nc);
    scatter_columns(*backend_, a.mlp.dh, group_dh_.f(), d, c0, nc);
  }
  int last = first - 1;
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    backend_->upload(a.dln2, answer.data(), btc * sizeof(float));
    const float* at = answer.data() + btc;
    for (int k = first; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      backend_->upload(group_dh_.f(), at, static_cast<std::size_t>(nc) * d.BT() * sizeof(float));
      scatter_columns(*backend_, a.mlp.dh, group_dh_.f(), d, c0, nc);
      at += static_cast<std::size_t>(nc) * d.BT();
    }
  } else {
    backend_->copy(a.dln2, parts + static_cast<std::size_t>(last) * btc, btc * sizeof(float));
    --last;
  }
  add_down(*backend_, a.dln2, parts, last, btc);
}

namespace {

// The helper's scratch: fresh buffers, as the owner's are (the same alignment for the elementwise kernels).
struct HelpScratch {
  DeviceBuffer h, act, part;
  HelpScratch(Backend& be, const Dims& d, int max_nc)
      : h(be, static_cast<std::size_t>(d.BT()) * max_nc * sizeof(float)),
        act(be, static_cast<std::size_t>(d.BT()) * max_nc * sizeof(float)),
        part(be, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float)) {}
};

}  // namespace

std::vector<float> StageModel::mlp_forward_help(int groups, const std::vector<float>& input) const {
  check_groups(groups, "a helper's F");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = mlp_groups_ - groups;
  std::size_t in_floats = btc, out_floats = btc;
  for (int k = first; k < mlp_groups_; ++k) {
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    in_floats += 2 * static_cast<std::size_t>(nc) * d.C + nc + (c0 == 0 ? d.C : 0);
    out_floats += 2 * static_cast<std::size_t>(nc) * d.BT();
  }
  if (input.size() != in_floats) {
    throw Error("model: a helper's MLP forward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(in_floats) + " for " + std::to_string(groups) + " groups)");
  }
  // Offsets of each group's weights in the input, and of its pre-activation / GELU output in the answer.
  std::vector<std::size_t> w_at(static_cast<std::size_t>(mlp_groups_)), a_at(w_at.size());
  for (std::size_t k = static_cast<std::size_t>(first), wi = btc, ai = btc; k < w_at.size(); ++k) {
    const int c0 = group_begin(static_cast<int>(k)), nc = group_begin(static_cast<int>(k) + 1) - c0;
    w_at[k] = wi;
    a_at[k] = ai;
    wi += 2 * static_cast<std::size_t>(nc) * d.C + nc + (c0 == 0 ? d.C : 0);
    ai += 2 * static_cast<std::size_t>(nc) * d.BT();
  }
  std::vector<float> out(out_floats);
  HelpScratch tmp(*backend_, d, group_begin(1) + 1);
  for (int k = mlp_groups_ - 1; k >= first; --k) {  // the fixed order of addition, from the last group down
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    const std::size_t wn = static_cast<std::size_t>(nc) * d.C, cols = static_cast<std::size_t>(nc) * d.BT();
    const float* wk = input.data() + w_at[static_cast<std::size_t>(k)];
    group_forward(*backend_, tmp.part.f(), tmp.h.f(), tmp.act.f(), input.data(), wk, wk + wn, wk + wn + nc,
                  c0 == 0 ? wk + 2 * wn + nc : nullptr, d, nc);
    if (k == mlp_groups_ - 1) {
      std::copy(tmp.part.f(), tmp.part.f() + btc, out.data());
    } else {
      residual_forward(out.data(), tmp.part.f(), out.data(), btc, *backend_);
    }
    std::copy(tmp.h.f(), tmp.h.f() + cols, out.data() + a_at[static_cast<std::size_t>(k)]);
    std::copy(tmp.act.f(), tmp.act.f() + cols, out.data() + a_at[static_cast<std::size_t>(k)] + cols);
  }
  return out;
}

std::vector<float> StageModel::mlp_backward_input_help(int groups, const std::vector<float>& input) const {
  check_groups(groups, "a helper's B");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = mlp_groups_ - groups;
  std::vector<std::size_t> in_at(static_cast<std::size_t>(mlp_groups_)), out_at(in_at.size());
  std::size_t in_floats = btc, out_floats = btc;
  for (int k = first; k < mlp_groups_; ++k) {
    const int nc = group_begin(k + 1) - group_begin(k);
    in_at[static_cast<std::size_t>(k)] = in_floats;
    out_at[static_cast<std::size_t>(k)] = out_floats;
    in_floats += 2 * static_cast<std::size_t>(nc) * d.C + static_cast<std::size_t>(nc) * d.BT();
    out_floats += static_cast<std::size_t>(nc) * d.BT();
  }
  if (input.size() != in_floats) {
    throw Error("model: a helper's MLP backward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(in_floats) + " for " + std::to_string(groups) + " groups)");
  }
  std::vector<float> out(out_floats);
  // The LN2-output gradient accumulates in a fresh buffer, as the owner's does in a.dln2.
  DeviceBuffer acc(*backend_, btc * sizeof(float));
  HelpScratch tmp(*backend_, d, group_begin(1) + 1);
  for (int k = mlp_groups_ - 1; k >= first; --k) {
    const int nc = group_begin(k + 1) - group_begin(k);
    const std::size_t wn = static_cast<std::size_t>(nc) * d.C, cols = static_cast<std::size_t>(nc) * d.BT();
    const float* wk = input.data() + in_at[static_cast<std::size_t>(k)];
    std::copy(wk + 2 * wn, wk + 2 * wn + cols, tmp.h.f());
    group_backward_input(*backend_, tmp.part.f(), tmp.act.f(), tmp.h.f(), input.data(), wk, wk + wn, d, nc);
    if (k == mlp_groups_ - 1) {
      std::copy(tmp.part.f(), tmp.part.f() + btc, acc.f());
    } else {
      residual_forward(acc.f(), tmp.part.f(), acc.f(), btc, *backend_);
    }
    std::copy(tmp.act.f(), tmp.act.f() + cols, out.data() + out_at[static_cast<std::size_t>(k)]);
  }
  std::copy(acc.f(), acc.f() + btc, out.data());
  return out;
}

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
