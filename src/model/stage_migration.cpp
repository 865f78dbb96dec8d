// StageModel's part of computation migration (stage.hpp, "computation migration"): the MLP of F, B and W in column
// groups and the attention in head groups, what a helper needs for some of them, the helper's computation and the
// landing of its answer.
//
// Why groups even where nothing moves: a product split by columns does not give the bits of the whole product
// (BLAS blocks differently), so every W of a run with migration on computes the weight gradients of each grouped
// unit group by group from compact copies of the group's columns, on whichever rank. A group's gradients are
// accumulated into zeroed blocks (W's slot is zeroed per microbatch; a helper zeroes its own), so a helper's answer
// copied into the slot is the bits the owner would have computed. F and B likewise compute each group on compact
// buffers of their own (fresh allocations on both sides, so the elementwise and attention kernels see the same layout)
// and add the groups' partial sums in one order, from the last group down: a helper holds the last groups, so its
// answer is a prefix of that sum.
#include <algorithm>
#include <array>
#include <cstring>
#include <span>

#include "conductor/model/attention.hpp"
#include "conductor/model/block.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
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

// Copies columns [c0, c0 + n) of the [rows, stride] buffer src into the compact [rows, n] buffer dst (backend memory).
void gather_block(Backend& be, float* dst, const float* src, long rows, int stride, int c0, int n) {
  for (long r = 0; r < rows; ++r) {
    be.copy(dst + r * n, src + r * stride + c0, static_cast<std::size_t>(n) * sizeof(float));
  }
}

// Copies columns [c0, c0 + nc) of the [BT, F] buffer src into the compact [BT, nc] buffer dst (backend memory).
void gather_columns(Backend& be, float* dst, const float* src, const Dims& d, int c0, int nc) {
  gather_block(be, dst, src, d.BT(), d.F, c0, nc);
}

// Downloads columns [c0, c0 + n) of the [rows, stride] backend buffer src into the compact host buffer dst.
void download_block(Backend& be, float* dst, const float* src, long rows, int stride, int c0, int n) {
  for (long r = 0; r < rows; ++r) {
    be.download(dst + r * n, src + r * stride + c0, static_cast<std::size_t>(n) * sizeof(float));
  }
}

// Floats of one head group's weight gradients (qkv_w, qkv_b, proj_w; proj_b for the group at head 0).
std::size_t head_grad_floats(const Dims& d, int h0, int ng) {
  const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
  return 4 * ny * d.C + 3 * ny + (h0 == 0 ? d.C : 0);
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

// Scatters the compact [rows, n] buffer src into columns [c0, c0 + n) of the [rows, stride] buffer dst.
void scatter_block(Backend& be, float* dst, const float* src, long rows, int stride, int c0, int n) {
  for (long r = 0; r < rows; ++r) {
    be.copy(dst + r * stride + c0, src + r * n, static_cast<std::size_t>(n) * sizeof(float));
  }
}

// Where one head group's stash lives in a layer's full buffers: QKV [BT, 3C], attention output [BT, C] and
// log-sum-exp [B, NH*T] (attention.hpp), as (rows, stride, first column, columns) of each.
struct HeadStash {
  long rows;
  int stride, c0, n;
};
std::array<HeadStash, 3> head_stash(const Dims& d, int h0, int ng) {
  return {HeadStash{d.BT(), 3 * d.C, 3 * h0 * d.HS, 3 * ng * d.HS}, HeadStash{d.BT(), d.C, h0 * d.HS, ng * d.HS},
          HeadStash{d.B, d.NH * d.T, h0 * d.T, ng * d.T}};
}

// One head group's F: its QKV [BT, 3 ng HS], attention output y [BT, ng HS], log-sum-exp [B, ng, T] and partial
// output p [BT, C] (proj_b: group 0's, else null). Owner and helper run exactly this on compact buffers of their own.
void head_group_forward(Backend& be, float* p, float* qkv, float* y, float* lse, const float* ln1, const float* qkv_w,
                        const float* qkv_b, const float* proj_w, const float* proj_b, const Dims& d, int ng) {
  const int ny = ng * d.HS;
  matmul_forward(qkv, ln1, qkv_w, qkv_b, d.B, d.T, d.C, 3 * ny, WeightLayout::out_in, Accumulate::no, be);
  attention_forward(y, lse, qkv, d.B, d.T, ny, ng, be);
  matmul_forward(p, y, proj_w, proj_b, d.B, d.T, ny, d.C, WeightLayout::in_out, Accumulate::no, be);
}

// One head group's B: its QKV gradient dqkv and its partial LN1-output gradient q [BT, C] (dy, delta: scratch).
void head_group_backward_input(Backend& be, float* q, float* dqkv, float* dy, float* delta, const float* dx2,
                               const float* qkv, const float* y, const float* lse, const float* proj_w,
                               const float* qkv_w, const Dims& d, int ng) {
  const int ny = ng * d.HS;
  matmul_backward_input(dy, dx2, proj_w, d.B, d.T, ny, d.C, WeightLayout::in_out, Accumulate::no, be);
  attention_backward(dqkv, delta, dy, qkv, y, lse, d.B, d.T, ny, ng, be);
  matmul_backward_input(q, dqkv, qkv_w, d.B, d.T, d.C, 3 * ny, WeightLayout::out_in, Accumulate::no, be);
}

// Floats of one head group's weights in a request (qkv_w, qkv_b, proj_w; proj_b for the group at head 0: F) and
// of its stash (QKV, attention output, log-sum-exp).
std::size_t head_weight_floats(const Dims& d, int h0, int ng, bool forward) {
  const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
  return 4 * ny * d.C + (forward ? 3 * ny + (h0 == 0 ? d.C : 0) : 0);
}
std::size_t head_stash_floats(const Dims& d, int ng) {
  return 4 * static_cast<std::size_t>(ng) * d.HS * d.BT() + static_cast<std::size_t>(d.B) * ng * d.T;
}

// acc = parts[k] + acc for k = last .. 0: the groups' fixed order of addition (stage.hpp).
void add_down(Backend& be, float* acc, const float* parts, int last, std::size_t n) {
  for (int k = last; k >= 0; --k) residual_forward(acc, parts + static_cast<std::size_t>(k) * n, acc, n, be);
}

}  // namespace

void StageModel::check_groups(int groups, const char* what) const {
  const int most = std::max({mlp_groups_, head_groups_, vocab_groups_});
  if (most < 2 || groups < 1 || groups > most) {
    throw Error(std::string("model: ") + std::to_string(groups) + " groups asked for " + what + " (the model has " +
                std::to_string(most > 1 ? most : 0) + ")");
  }
}

void StageModel::give_groups(int groups, GroupExchange exchange) {
  check_groups(groups, "an owner's F or B");
  give_groups_ = groups;
  exchange_ = std::move(exchange);
}

// A request of F or B names its unit in its last float (both units may move in one op, a request per unit and
// layer): the helper's entry points dispatch on it.
namespace {
constexpr float kMlpRequest = 0.0f, kHeadsRequest = 1.0f;
}  // namespace

std::vector<float> StageModel::forward_help(int groups, const std::vector<float>& input) const {
  if (input.empty()) throw Error("model: an empty request to a helper's F");
  const std::span<const float> body(input.data(), input.size() - 1);
  if (is_vocab_request(input)) return vocab_forward_help(groups, body);  // stage_vocab.cpp
  if (input.back() == kHeadsRequest && head_groups_ > 1) return head_forward_help(groups, body);
  if (input.back() == kMlpRequest && mlp_groups_ > 1) return mlp_forward_help(groups, body);
  throw Error("model: a helper's F request names unit " + std::to_string(input.back()) + ", which is not grouped here");
}

std::vector<float> StageModel::backward_input_help(int groups, const std::vector<float>& input) const {
  if (input.empty()) throw Error("model: an empty request to a helper's B");
  const std::span<const float> body(input.data(), input.size() - 1);
  if (is_vocab_request(input)) return vocab_backward_input_help(groups, body);  // stage_vocab.cpp
  if (input.back() == kHeadsRequest && head_groups_ > 1) return head_backward_input_help(groups, body);
  if (input.back() == kMlpRequest && mlp_groups_ > 1) return mlp_backward_input_help(groups, body);
  throw Error("model: a helper's B request names unit " + std::to_string(input.back()) + ", which is not grouped here");
}

// One layer of F with either unit grouped: LN1, the attention (in head groups or whole), LN2, the MLP (in column
// groups or whole); the ungrouped parts are the trainer's own (block.hpp).
void StageModel::layer_forward_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  if (head_groups_ > 1) {
    layernorm_forward(a.ln1, a.mean1, a.rstd1, a.x, w.ln1_w, w.ln1_b, d.B, d.T, d.C, *backend_);
    attention_forward_grouped(a, w);
    layernorm_forward(a.ln2, a.mean2, a.rstd2, a.x2, w.ln2_w, w.ln2_b, d.B, d.T, d.C, *backend_);
  } else {
    layer_forward_before_mlp(*backend_, a, w, d);
  }
  if (mlp_groups_ > 1) {
    mlp_forward_grouped(a, w);
  } else {
    layer_forward_mlp(*backend_, a, w, d);
  }
}

// One layer of B likewise: the MLP (dln2), LN2, the attention (dln1), LN1.
void StageModel::layer_backward_input_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  if (mlp_groups_ > 1) {
    mlp_backward_input_grouped(a, w);
  } else {
    layer_backward_input_mlp(*backend_, a, w, d);
  }
  if (head_groups_ > 1) {
    layer_backward_input_ln2(*backend_, a, w, d);
    attention_backward_input_grouped(a, w);
    layer_backward_input_ln1(*backend_, a, w, d);
  } else {
    layer_backward_input_after_mlp(*backend_, a, w, d);
  }
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
    in.push_back(kMlpRequest);
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
    in.push_back(kMlpRequest);
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

std::vector<float> StageModel::mlp_forward_help(int groups, std::span<const float> input) const {
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

std::vector<float> StageModel::mlp_backward_input_help(int groups, std::span<const float> input) const {
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

// ---- the attention in head groups (F and B); the same shape as the MLP's above ----

// F of one layer's attention in head groups: x2 = x + (p[0] + (p[1] + ... + p[G-1])), the last give_groups_
// groups' sum from the helper; each group's QKV, output and log-sum-exp land in the layer's stash for B and W.
void StageModel::attention_forward_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = head_groups_ - give_groups_;
  float* stash[3] = {a.attn.qkv, a.attn.y, a.attn.lse};
  float* compact[3] = {group_qkv_.f(), group_y_.f(), group_lse_.f()};
  if (give_groups_ > 0) {
    std::vector<float> in(btc);
    std::size_t answer = btc;
    backend_->download(in.data(), a.ln1, btc * sizeof(float));
    for (int k = first; k < head_groups_; ++k) {
      const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
      const std::size_t ny = static_cast<std::size_t>(ng) * d.HS, at = in.size();
      in.resize(at + head_weight_floats(d, h0, ng, true));
      backend_->download(in.data() + at, w.qkv_w + 3L * h0 * d.HS * d.C, 3 * ny * d.C * sizeof(float));
      backend_->download(in.data() + at + 3 * ny * d.C, w.qkv_b + 3L * h0 * d.HS, 3 * ny * sizeof(float));
      backend_->download(in.data() + at + 3 * ny * (d.C + 1), w.proj_w + static_cast<long>(h0) * d.HS * d.C,
                         ny * d.C * sizeof(float));
      if (h0 == 0) backend_->download(in.data() + at + 3 * ny + 4 * ny * d.C, w.proj_b, d.C * sizeof(float));
      answer += head_stash_floats(d, ng);
    }
    in.push_back(kHeadsRequest);
    exchange_.send(std::move(in), answer);
  }
  float* parts = group_parts_.f();
  for (int k = 0; k < first; ++k) {
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    head_group_forward(*backend_, parts + k * btc, compact[0], compact[1], compact[2], a.ln1,
                       w.qkv_w + 3L * h0 * d.HS * d.C, w.qkv_b + 3L * h0 * d.HS,
                       w.proj_w + static_cast<long>(h0) * d.HS * d.C, h0 == 0 ? w.proj_b : nullptr, d, ng);
    const std::array<HeadStash, 3> at = head_stash(d, h0, ng);
    for (int t = 0; t < 3; ++t)
      scatter_block(*backend_, stash[t], compact[t], at[t].rows, at[t].stride, at[t].c0, at[t].n);
  }
  int last = first - 1;  // the highest group not yet in a.x2
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    backend_->upload(a.x2, answer.data(), btc * sizeof(float));
    const float* from = answer.data() + btc;
    for (int k = first; k < head_groups_; ++k) {
      const std::array<HeadStash, 3> at = head_stash(d, head_begin(k), head_begin(k + 1) - head_begin(k));
      for (int t = 0; t < 3; ++t) {
        const std::size_t n = static_cast<std::size_t>(at[t].rows) * at[t].n;
        backend_->upload(compact[t], from, n * sizeof(float));
        scatter_block(*backend_, stash[t], compact[t], at[t].rows, at[t].stride, at[t].c0, at[t].n);
        from += n;
      }
    }
  } else {
    backend_->copy(a.x2, parts + static_cast<std::size_t>(last) * btc, btc * sizeof(float));
    --last;
  }
  add_down(*backend_, a.x2, parts, last, btc);
  residual_forward(a.x2, a.x, a.x2, btc, *backend_);
}

// B of one layer's attention in head groups: dln1 = q[0] + (q[1] + ... + q[G-1]) from dx2; each group's QKV
// gradient lands in a.attn.dqkv for W.
void StageModel::attention_backward_input_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = head_groups_ - give_groups_;
  const float* stash[3] = {a.attn.qkv, a.attn.y, a.attn.lse};
  float* compact[3] = {group_qkv_.f(), group_y_.f(), group_lse_.f()};
  if (give_groups_ > 0) {
    std::vector<float> in(btc);
    std::size_t answer = btc;
    backend_->download(in.data(), a.dx2, btc * sizeof(float));
    for (int k = first; k < head_groups_; ++k) {
      const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
      const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
      std::size_t at = in.size();
      in.resize(at + head_weight_floats(d, h0, ng, false) + head_stash_floats(d, ng));
      backend_->download(in.data() + at, w.proj_w + static_cast<long>(h0) * d.HS * d.C, ny * d.C * sizeof(float));
      backend_->download(in.data() + at + ny * d.C, w.qkv_w + 3L * h0 * d.HS * d.C, 3 * ny * d.C * sizeof(float));
      at += 4 * ny * d.C;
      const std::array<HeadStash, 3> hs = head_stash(d, h0, ng);
      for (int t = 0; t < 3; ++t) {
        download_block(*backend_, in.data() + at, stash[t], hs[t].rows, hs[t].stride, hs[t].c0, hs[t].n);
        at += static_cast<std::size_t>(hs[t].rows) * hs[t].n;
      }
      answer += 3 * ny * d.BT();
    }
    in.push_back(kHeadsRequest);
    exchange_.send(std::move(in), answer);
  }
  float* parts = group_parts_.f();
  for (int k = 0; k < first; ++k) {
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    const std::array<HeadStash, 3> at = head_stash(d, h0, ng);
    for (int t = 0; t < 3; ++t)
      gather_block(*backend_, compact[t], stash[t], at[t].rows, at[t].stride, at[t].c0, at[t].n);
    head_group_backward_input(*backend_, parts + k * btc, group_dqkv_.f(), group_dy_.f(), group_delta_.f(), a.dx2,
                              compact[0], compact[1], compact[2], w.proj_w + static_cast<long>(h0) * d.HS * d.C,
                              w.qkv_w + 3L * h0 * d.HS * d.C, d, ng);
    scatter_block(*backend_, a.attn.dqkv, group_dqkv_.f(), at[0].rows, at[0].stride, at[0].c0, at[0].n);
  }
  int last = first - 1;
  if (give_groups_ > 0) {
    const std::vector<float> answer = exchange_.receive();
    backend_->upload(a.dln1, answer.data(), btc * sizeof(float));
    const float* from = answer.data() + btc;
    for (int k = first; k < head_groups_; ++k) {
      const HeadStash q = head_stash(d, head_begin(k), head_begin(k + 1) - head_begin(k))[0];
      const std::size_t n = static_cast<std::size_t>(q.rows) * q.n;
      backend_->upload(group_dqkv_.f(), from, n * sizeof(float));
      scatter_block(*backend_, a.attn.dqkv, group_dqkv_.f(), q.rows, q.stride, q.c0, q.n);
      from += n;
    }
  } else {
    backend_->copy(a.dln1, parts + static_cast<std::size_t>(last) * btc, btc * sizeof(float));
    --last;
  }
  add_down(*backend_, a.dln1, parts, last, btc);
}

namespace {

// A helper's scratch for head groups: fresh buffers, as the owner's are.
struct HeadScratch {
  DeviceBuffer qkv, y, lse, dqkv, dy, delta, part, acc;
  HeadScratch(Backend& be, const Dims& d, int max_ng)
      : qkv(be, 3 * bytes(d.BT(), max_ng, d.HS)),
        y(be, bytes(d.BT(), max_ng, d.HS)),
        lse(be, bytes(d.B, max_ng, d.T)),
        dqkv(be, 3 * bytes(d.BT(), max_ng, d.HS)),
        dy(be, bytes(d.BT(), max_ng, d.HS)),
        delta(be, bytes(d.B, max_ng, d.T)),
        part(be, bytes(d.BT(), 1, d.C)),
        acc(be, bytes(d.BT(), 1, d.C)) {}
  static std::size_t bytes(long a, int b, int c) { return static_cast<std::size_t>(a) * b * c * sizeof(float); }
};

}  // namespace

std::vector<float> StageModel::head_forward_help(int groups, std::span<const float> input) const {
  check_groups(groups, "a helper's F");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = head_groups_ - groups;
  std::vector<std::size_t> w_at(static_cast<std::size_t>(head_groups_)), a_at(w_at.size());
  std::size_t in_floats = btc, out_floats = btc;
  int max_ng = 1;
  for (int k = first; k < head_groups_; ++k) {
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    w_at[static_cast<std::size_t>(k)] = in_floats;
    a_at[static_cast<std::size_t>(k)] = out_floats;
    in_floats += head_weight_floats(d, h0, ng, true);
    out_floats += head_stash_floats(d, ng);
    max_ng = std::max(max_ng, ng);
  }
  if (input.size() != in_floats) {
    throw Error("model: a helper's attention forward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(in_floats) + " for " + std::to_string(groups) + " groups)");
  }
  std::vector<float> out(out_floats);
  HeadScratch tmp(*backend_, d, max_ng);
  for (int k = head_groups_ - 1; k >= first; --k) {  // the fixed order of addition, from the last group down
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
    const float* wk = input.data() + w_at[static_cast<std::size_t>(k)];
    head_group_forward(*backend_, tmp.part.f(), tmp.qkv.f(), tmp.y.f(), tmp.lse.f(), input.data(), wk,
                       wk + 3 * ny * d.C, wk + 3 * ny * (d.C + 1), h0 == 0 ? wk + 3 * ny + 4 * ny * d.C : nullptr, d,
                       ng);
    if (k == head_groups_ - 1) {
      std::copy(tmp.part.f(), tmp.part.f() + btc, out.data());
    } else {
      residual_forward(out.data(), tmp.part.f(), out.data(), btc, *backend_);
    }
    float* to = out.data() + a_at[static_cast<std::size_t>(k)];
    to = std::copy(tmp.qkv.f(), tmp.qkv.f() + 3 * ny * d.BT(), to);
    to = std::copy(tmp.y.f(), tmp.y.f() + ny * d.BT(), to);
    std::copy(tmp.lse.f(), tmp.lse.f() + static_cast<std::size_t>(d.B) * ng * d.T, to);
  }
  return out;
}

std::vector<float> StageModel::head_backward_input_help(int groups, std::span<const float> input) const {
  check_groups(groups, "a helper's B");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  const int first = head_groups_ - groups;
  std::vector<std::size_t> in_at(static_cast<std::size_t>(head_groups_)), out_at(in_at.size());
  std::size_t in_floats = btc, out_floats = btc;
  int max_ng = 1;
  for (int k = first; k < head_groups_; ++k) {
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    in_at[static_cast<std::size_t>(k)] = in_floats;
    out_at[static_cast<std::size_t>(k)] = out_floats;
    in_floats += head_weight_floats(d, h0, ng, false) + head_stash_floats(d, ng);
    out_floats += 3 * static_cast<std::size_t>(ng) * d.HS * d.BT();
    max_ng = std::max(max_ng, ng);
  }
  if (input.size() != in_floats) {
    throw Error("model: a helper's attention backward input of " + std::to_string(input.size()) + " floats (expected " +
                std::to_string(in_floats) + " for " + std::to_string(groups) + " groups)");
  }
  std::vector<float> out(out_floats);
  HeadScratch tmp(*backend_, d, max_ng);  // the LN1-output gradient accumulates in tmp.acc, as the owner's in dln1
  for (int k = head_groups_ - 1; k >= first; --k) {
    const int ng = head_begin(k + 1) - head_begin(k);
    const std::size_t ny = static_cast<std::size_t>(ng) * d.HS, rows = static_cast<std::size_t>(d.BT());
    const float* wk = input.data() + in_at[static_cast<std::size_t>(k)];
    const float* st = wk + 4 * ny * d.C;
    std::copy(st, st + 3 * ny * rows, tmp.qkv.f());
    std::copy(st + 3 * ny * rows, st + 4 * ny * rows, tmp.y.f());
    std::copy(st + 4 * ny * rows, st + 4 * ny * rows + static_cast<std::size_t>(d.B) * ng * d.T, tmp.lse.f());
    head_group_backward_input(*backend_, tmp.part.f(), tmp.dqkv.f(), tmp.dy.f(), tmp.delta.f(), input.data(),
                              tmp.qkv.f(), tmp.y.f(), tmp.lse.f(), wk, wk + ny * d.C, d, ng);
    if (k == head_groups_ - 1) {
      std::copy(tmp.part.f(), tmp.part.f() + btc, tmp.acc.f());
    } else {
      residual_forward(tmp.acc.f(), tmp.part.f(), tmp.acc.f(), btc, *backend_);
    }
    std::copy(tmp.dqkv.f(), tmp.dqkv.f() + 3 * ny * rows, out.data() + out_at[static_cast<std::size_t>(k)]);
  }
  std::copy(tmp.acc.f(), tmp.acc.f() + btc, out.data());
  return out;
}

void StageModel::head_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here) {
  const Dims& d = dims_;
  for (int k = 0; k < groups_here; ++k) {
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0, ny = ng * d.HS;
    gather_block(*backend_, group_dqkv_.f(), a.attn.dqkv, d.BT(), 3 * d.C, 3 * h0 * d.HS, 3 * ny);
    gather_block(*backend_, group_y_.f(), a.attn.y, d.BT(), d.C, h0 * d.HS, ny);
    AttnSliceBuffers buf;
    buf.dqkv = group_dqkv_.f();
    buf.y = group_y_.f();
    head_group_backward_weight(*backend_, head_group_grads(g, d, h0, h0 + ng), buf, a.ln1, a.dx2, d, ng);
  }
}

std::size_t StageModel::weight_in_layer(int groups) const {
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  std::size_t n = 0;
  if (mlp_groups_ > 1) n += 2 * btc + 2 * static_cast<std::size_t>(d.F - group_begin(mlp_groups_ - groups)) * d.BT();
  if (head_groups_ > 1) {
    const std::size_t ny = static_cast<std::size_t>(d.NH - head_begin(head_groups_ - groups)) * d.HS;
    n += 2 * btc + 4 * ny * d.BT();
  }
  return n;
}

std::size_t StageModel::weight_out_layer(int groups) const {
  std::size_t n = 0;
  for (int k = mlp_groups_ > 1 ? mlp_groups_ - groups : mlp_groups_; k < mlp_groups_; ++k) {
    n += group_grad_floats(dims_, group_begin(k), group_begin(k + 1) - group_begin(k));
  }
  for (int k = head_groups_ > 1 ? head_groups_ - groups : head_groups_; k < head_groups_; ++k) {
    n += head_grad_floats(dims_, head_begin(k), head_begin(k + 1) - head_begin(k));
  }
  return n;
}

std::vector<float> StageModel::weight_inputs(int vs, int mb, int groups) {
  VStage& s = stage(vs);
  const int most = std::max({mlp_groups_, head_groups_, vocab_groups_});
  if (most < 2 || groups < 1 || groups > most) {
    throw Error("model: " + std::to_string(groups) + " groups asked of virtual stage " + std::to_string(vs) +
                " (it has " + std::to_string(most > 1 ? most : 0) + ")");
  }
  Micro& m = micro(s, mb, Phase::after_backward_input, "weight_inputs");
  const Dims& d = dims_;
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  std::vector<float> out(static_cast<std::size_t>(s.n_layers) * weight_in_layer(groups));
  float* at = out.data();
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerActs& a = m.layers[l];
    if (mlp_groups_ > 1) {
      backend_->download(at, a.ln2, btc * sizeof(float));
      backend_->download(at + btc, a.dout, btc * sizeof(float));
      at += 2 * btc;
      for (int k = mlp_groups_ - groups; k < mlp_groups_; ++k) {
        const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
        for (const float* src : {a.mlp.gelu, a.mlp.dh}) {
          download_block(*backend_, at, src, d.BT(), d.F, c0, nc);
          at += static_cast<std::size_t>(nc) * d.BT();
        }
      }
    }
    if (head_groups_ > 1) {
      backend_->download(at, a.ln1, btc * sizeof(float));
      backend_->download(at + btc, a.dx2, btc * sizeof(float));
      at += 2 * btc;
      for (int k = head_groups_ - groups; k < head_groups_; ++k) {
        const int h0 = head_begin(k), ny = (head_begin(k + 1) - h0) * d.HS;
        download_block(*backend_, at, a.attn.dqkv, d.BT(), 3 * d.C, 3 * h0 * d.HS, 3 * ny);
        at += 3 * static_cast<std::size_t>(ny) * d.BT();
        download_block(*backend_, at, a.attn.y, d.BT(), d.C, h0 * d.HS, ny);
        at += static_cast<std::size_t>(ny) * d.BT();
      }
    }
  }
  append_vocab_weight_inputs(s, m, groups, out);  // the LM head's part (stage_vocab.cpp)
  s.groups_away.resize(static_cast<std::size_t>(microbatches_), 0);
  s.groups_away[static_cast<std::size_t>(mb)] = groups;
  return out;
}

std::size_t StageModel::weight_grads_floats(int vs, int groups) const {
  return static_cast<std::size_t>(stage(vs).n_layers) * weight_out_layer(groups) +
         vocab_grads_floats(stage(vs), groups);
}

namespace {

// The helper's part of one MLP group's W: its gradients into the zeroed blocks at `at` (group_grad_floats' layout).
void mlp_group_grads_into(Backend& be, float* at, const float* ln2, const float* dout, const float* gelu,
                          const float* dh, const Dims& d, int c0, int nc) {
  MlpSliceBuffers buf;
  buf.gelu = const_cast<float*>(gelu);  // read only: W reads the GELU output and the pre-activation gradient
  buf.dh = const_cast<float*>(dh);
  MlpGroupGrads g;
  g.fc_w = at;
  g.fc_b = at + static_cast<std::size_t>(nc) * d.C;
  g.fcproj_w = g.fc_b + nc;
  g.fcproj_b = c0 == 0 ? g.fcproj_w + static_cast<std::size_t>(nc) * d.C : nullptr;
  mlp_group_backward_weight(be, g, buf, ln2, dout, d, nc);
}

// The same for one head group (head_grad_floats' layout).
void head_group_grads_into(Backend& be, float* at, const float* ln1, const float* dout, const float* dqkv,
                           const float* y, const Dims& d, int h0, int ng) {
  const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
  AttnSliceBuffers buf;
  buf.dqkv = const_cast<float*>(dqkv);  // read only
  buf.y = const_cast<float*>(y);
  HeadGroupGrads g;
  g.qkv_w = at;
  g.qkv_b = at + 3 * ny * d.C;
  g.proj_w = g.qkv_b + 3 * ny;
  g.proj_b = h0 == 0 ? g.proj_w + ny * d.C : nullptr;
  head_group_backward_weight(be, g, buf, ln1, dout, d, ng);
}

}  // namespace

std::vector<float> StageModel::layer_weight_grads(int groups, const std::vector<float>& inputs) const {
  const Dims& d = dims_;
  const int most = std::max(mlp_groups_, head_groups_);
  if (most < 2 || groups < 1 || groups > most) {
    throw Error("model: " + std::to_string(groups) + " groups asked of a helper (the model has " +
                std::to_string(most > 1 ? most : 0) + ")");
  }
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C, in_layer = weight_in_layer(groups);
  if (inputs.empty() || inputs.size() % in_layer != 0) {
    throw Error("model: a helper's weight-gradient input of " + std::to_string(inputs.size()) +
                " floats is not a whole number of layers of " + std::to_string(in_layer));
  }
  const std::size_t layers = inputs.size() / in_layer;
  std::vector<float> out(layers * weight_out_layer(groups), 0.0f);  // zeroed, as W's slot is
  const float* in = inputs.data();
  float* at = out.data();
  // The helper's model is on the cpu backend (host memory); migration runs on no other.
  for (std::size_t l = 0; l < layers; ++l) {
    if (mlp_groups_ > 1) {
      const float* ln2 = in;
      const float* dout = in + btc;
      in += 2 * btc;
      for (int k = mlp_groups_ - groups; k < mlp_groups_; ++k) {
        const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
        const std::size_t cols = static_cast<std::size_t>(nc) * d.BT();
        mlp_group_grads_into(*backend_, at, ln2, dout, in, in + cols, d, c0, nc);
        in += 2 * cols;
        at += group_grad_floats(d, c0, nc);
      }
    }
    if (head_groups_ > 1) {
      const float* ln1 = in;
      const float* dout = in + btc;
      in += 2 * btc;
      for (int k = head_groups_ - groups; k < head_groups_; ++k) {
        const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
        const std::size_t ny = static_cast<std::size_t>(ng) * d.HS * d.BT();
        head_group_grads_into(*backend_, at, ln1, dout, in, in + 3 * ny, d, h0, ng);
        in += 4 * ny;
        at += head_grad_floats(d, h0, ng);
      }
    }
  }
  return out;
}

void StageModel::land_weight_grads(int vs, int mb, const std::vector<float>& grads) {
  VStage& s = stage(vs);
  const std::size_t i = static_cast<std::size_t>(mb);
  if (i >= s.held_back.size() || !s.held_back[i]) {
    throw Error("model: weight gradients for microbatch " + std::to_string(mb) + " of virtual stage " +
                std::to_string(vs) + " landed, but its W held nothing back");
  }
  const int groups = s.groups_away[i];
  if (grads.size() != weight_grads_floats(vs, groups)) {
    throw Error("model: a helper's answer of " + std::to_string(grads.size()) + " floats for microbatch " +
                std::to_string(mb) + " of virtual stage " + std::to_string(vs) + " (expected " +
                std::to_string(weight_grads_floats(vs, groups)) + ")");
  }
  const Dims& d = dims_;
  const float* at = grads.data();
  const auto put = [&](float* dst, std::size_t n) {
    if (dst) backend_->upload(dst, at, n * sizeof(float));
    at += dst ? n : 0;
  };
  for (int l = 0; l < s.n_layers; ++l) {
    const LayerView& slot = s.held_back[i]->g[static_cast<std::size_t>(l)];
    for (int k = mlp_groups_ > 1 ? mlp_groups_ - groups : mlp_groups_; k < mlp_groups_; ++k) {
      const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
      const MlpGroupGrads g = mlp_group_grads(slot, d, c0, c0 + nc);
      const std::size_t w = static_cast<std::size_t>(nc) * d.C;
      put(g.fc_w, w);
      put(g.fc_b, static_cast<std::size_t>(nc));
      put(g.fcproj_w, w);
      put(g.fcproj_b, static_cast<std::size_t>(d.C));
    }
    for (int k = head_groups_ > 1 ? head_groups_ - groups : head_groups_; k < head_groups_; ++k) {
      const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
      const HeadGroupGrads g = head_group_grads(slot, d, h0, h0 + ng);
      const std::size_t ny = static_cast<std::size_t>(ng) * d.HS;
      put(g.qkv_w, 3 * ny * d.C);
      put(g.qkv_b, 3 * ny);
      put(g.proj_w, ny * d.C);
      put(g.proj_b, static_cast<std::size_t>(d.C));
    }
  }
  land_vocab_weight_grads(s, s.held_back[i]->buf.f(), groups, at);  // stage_vocab.cpp
  s.groups_away[i] = 0;
  s.waiting[i] = std::move(s.held_back[i]);
  add_slots_in_order(s);
}

}  // namespace conductor::model
