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
//
// F and B of every grouped unit run one skeleton (run_grouped on the owner, help_grouped on a helper) over a
// description of the unit's pass (GroupedPass: each group's weight slices, stash blocks and kernel), W likewise
// (WeightPass); a unit is added by describing it (mlp_pass, heads_pass; mlp_weight_pass, heads_weight_pass) and
// naming it in grouped_pass and weight_passes.
#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <span>

#include "conductor/model/attention.hpp"
#include "conductor/model/block.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/util/error.hpp"
#include "stage_internal.hpp"
#include "staged.hpp"

namespace conductor::model {

namespace {

// Columns [c0, c0 + n) of a layer's [rows, stride] stash tensor: a group's part of it, which the group reads or
// writes as a compact [rows, n] buffer of its own.
struct ColumnBlock {
  long rows = 0;
  int stride = 0, c0 = 0, n = 0;
  std::size_t floats() const { return static_cast<std::size_t>(rows) * n; }
};

// Copies block b of the [rows, stride] buffer src into the compact buffer dst (backend memory).
void gather_block(Backend& be, float* dst, const float* src, const ColumnBlock& b) {
  for (long r = 0; r < b.rows; ++r) {
    be.copy(dst + r * b.n, src + r * b.stride + b.c0, static_cast<std::size_t>(b.n) * sizeof(float));
  }
}

// Downloads block b of the backend buffer src into the compact host buffer dst.
void download_block(Backend& be, float* dst, const float* src, const ColumnBlock& b) {
  for (long r = 0; r < b.rows; ++r) {
    be.download(dst + r * b.n, src + r * b.stride + b.c0, static_cast<std::size_t>(b.n) * sizeof(float));
  }
}

// Scatters the compact buffer src into block b of the [rows, stride] buffer dst.
void scatter_block(Backend& be, float* dst, const float* src, const ColumnBlock& b) {
  for (long r = 0; r < b.rows; ++r) {
    be.copy(dst + r * b.stride + b.c0, src + r * b.n, static_cast<std::size_t>(b.n) * sizeof(float));
  }
}

// Columns [c0, c0 + nc) of a [BT, F] MLP buffer.
ColumnBlock mlp_columns(const Dims& d, int c0, int nc) { return ColumnBlock{d.BT(), d.F, c0, nc}; }

// Heads [h0, h0 + ng)'s blocks of a layer's attention stash: QKV [BT, 3C], attention output [BT, C] and
// log-sum-exp [B, NH*T] (attention.hpp).
std::array<ColumnBlock, 3> head_stash(const Dims& d, int h0, int ng) {
  return {ColumnBlock{d.BT(), 3 * d.C, 3 * h0 * d.HS, 3 * ng * d.HS}, ColumnBlock{d.BT(), d.C, h0 * d.HS, ng * d.HS},
          ColumnBlock{d.B, d.NH * d.T, h0 * d.T, ng * d.T}};
}

// acc = parts[k] + acc for k = last .. 0: the groups' fixed order of addition (stage.hpp).
void add_down(Backend& be, float* acc, const float* parts, int last, std::size_t n) {
  for (int k = last; k >= 0; --k) residual_forward(acc, parts + static_cast<std::size_t>(k) * n, acc, n, be);
}

// ---- F and B of a grouped unit, described group by group ----

// Floats [at, at + n) of one of a layer's weight tensors (n = 0: the group has none of it, as a bias only the first
// group holds).
struct WeightSlice {
  std::size_t at = 0, n = 0;
};

// Group k of a unit's F or B in the terms owner and helper share (offsets, no pointers).
struct GroupShape {
  int width = 0;                     // the kernel's width: the group's MLP columns or heads
  std::vector<WeightSlice> weights;  // one per weight tensor of the pass, in request order
  std::vector<ColumnBlock> in;       // stash the kernel reads (sent after the weights)
  std::vector<ColumnBlock> out;      // stash it writes, kept on the owner for the later passes
  std::vector<std::size_t> scratch;  // floats of its other buffers
};

// Group k's buffers as its kernel sees them: compact, fresh allocations on either rank (null: an empty slice).
struct GroupArgs {
  static constexpr std::size_t kMost = 4;  // tensors of a kind a pass may have
  int width = 0;
  float* part = nullptr;         // [BT, C] its partial output (F) or input gradient (B)
  const float* input = nullptr;  // [BT, C] the pass's input, which every group reads whole
  std::array<const float*, kMost> w{};
  std::array<float*, kMost> in{}, out{}, scratch{};
};

// The owner's buffers of one layer for a pass.
struct PassBuffers {
  const float* input = nullptr;                                // the pass's input [BT, C]
  float* sum = nullptr;                                        // where the groups' sum lands [BT, C]
  const float* residual = nullptr;                             // added to the sum last (F), or null
  std::vector<const float*> weights{};                         // the layer's weight tensors (GroupShape::weights)
  std::vector<float*> in{}, out{};                             // the layer's stash tensors (GroupShape::in, out)
  std::vector<float*> compact_in{}, compact_out{}, scratch{};  // the owner's compact buffers of one group
};

using GroupKernel = std::function<void(Backend&, const Dims&, const GroupArgs&)>;

}  // namespace

// One grouped unit's F or B (stage.hpp), described group by group. A helper's answer holds the first `returned`
// out tensors of each group; the owner makes the others from them (rebuild): what it can recompute with the same
// bits need not travel.
struct GroupedPass {
  float unit = 0;         // names the unit in a request (its last float)
  const char* what = "";  // for messages
  int groups = 1;
  std::size_t returned = 0;
  std::function<GroupShape(int k)> shape;
  GroupKernel kernel;   // group k's partial and out tensors from the input, weights and in tensors
  GroupKernel rebuild;  // the out tensors past `returned` from those before (null: none)
  std::function<PassBuffers(const LayerActs&, const LayerView&)> buffers;  // the owner's, for one layer
};

namespace {

constexpr float kMlpRequest = 0.0f, kHeadsRequest = 1.0f;  // the units' names in a request

void check_shape(const GroupShape& s) {
  if (std::max({s.weights.size(), s.in.size(), s.out.size(), s.scratch.size()}) > GroupArgs::kMost) {
    throw Error("model: a grouped pass describes more tensors of a kind than a group's kernel takes");
  }
}

// Group k's kernel arguments on the owner: its weight slices in place, its own compact buffers.
GroupArgs owner_args(const GroupShape& s, const PassBuffers& b, float* part) {
  check_shape(s);
  GroupArgs g;
  g.width = s.width;
  g.part = part;
  g.input = b.input;
  for (std::size_t i = 0; i < s.weights.size(); ++i) g.w[i] = s.weights[i].n ? b.weights[i] + s.weights[i].at : nullptr;
  std::copy(b.compact_in.begin(), b.compact_in.end(), g.in.begin());
  std::copy(b.compact_out.begin(), b.compact_out.end(), g.out.begin());
  std::copy(b.scratch.begin(), b.scratch.end(), g.scratch.begin());
  return g;
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

namespace {

// The request for groups [first, G) of one layer: the input, then per group its weight slices and in blocks, then
// the unit's name; and the floats of the answer.
std::pair<std::vector<float>, std::size_t> grouped_request(Backend& be, const Dims& d, const GroupedPass& u,
                                                           const PassBuffers& b, int first) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  std::vector<float> request(btc);
  std::size_t answer = btc;
  be.download(request.data(), b.input, btc * sizeof(float));
  for (int k = first; k < u.groups; ++k) {
    const GroupShape s = u.shape(k);
    for (std::size_t i = 0; i < s.weights.size(); ++i) {
      const std::size_t at = request.size();
      request.resize(at + s.weights[i].n);
      be.download(request.data() + at, b.weights[i] + s.weights[i].at, s.weights[i].n * sizeof(float));
    }
    for (std::size_t t = 0; t < s.in.size(); ++t) {
      const std::size_t at = request.size();
      request.resize(at + s.in[t].floats());
      download_block(be, request.data() + at, b.in[t], s.in[t]);
    }
    for (std::size_t t = 0; t < u.returned; ++t) answer += s.out[t].floats();
  }
  request.push_back(u.unit);
  return {std::move(request), answer};
}

// The helper's answer for groups [first, G) lands: its prefix of the sum in b.sum, each group's out tensors in the
// layer's stash (those it did not return rebuilt from those it did, on the owner's compact buffers).
void land_grouped(Backend& be, const Dims& d, const GroupedPass& u, const PassBuffers& b, int first,
                  const std::vector<float>& answer) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  be.upload(b.sum, answer.data(), btc * sizeof(float));
  const float* from = answer.data() + btc;
  for (int k = first; k < u.groups; ++k) {
    const GroupShape s = u.shape(k);
    const GroupArgs g = owner_args(s, b, nullptr);
    for (std::size_t t = 0; t < u.returned; ++t) {
      be.upload(g.out[t], from, s.out[t].floats() * sizeof(float));
      from += s.out[t].floats();
    }
    if (u.rebuild) u.rebuild(be, d, g);
    for (std::size_t t = 0; t < s.out.size(); ++t) scatter_block(be, b.out[t], g.out[t], s.out[t]);
  }
}

}  // namespace

// One layer of a grouped unit's F or B on the owner: the last give_groups_ groups' request out, its own groups
// computed meanwhile, then sum = p[0] + (p[1] + ... + p[G-1]) with the helper's answer (or the last own part) at
// its head, and the residual (F).
void StageModel::run_grouped(const GroupedPass& u, const LayerActs& a, const LayerView& w) {
  const PassBuffers b = u.buffers(a, w);
  const std::size_t btc = static_cast<std::size_t>(dims_.BT()) * dims_.C;
  const int first = u.groups - give_groups_;  // the first group a helper computes
  if (give_groups_ > 0) {
    auto [request, answer] = grouped_request(*backend_, dims_, u, b, first);
    exchange_.send(std::move(request), answer);
  }
  float* parts = group_parts_.f();
  for (int k = 0; k < first; ++k) {
    const GroupShape s = u.shape(k);
    const GroupArgs g = owner_args(s, b, parts + static_cast<std::size_t>(k) * btc);
    for (std::size_t t = 0; t < s.in.size(); ++t) gather_block(*backend_, g.in[t], b.in[t], s.in[t]);
    u.kernel(*backend_, dims_, g);
    for (std::size_t t = 0; t < s.out.size(); ++t) scatter_block(*backend_, b.out[t], g.out[t], s.out[t]);
  }
  int last = first - 1;  // the highest group not yet in the sum
  if (give_groups_ > 0) {
    land_grouped(*backend_, dims_, u, b, first, exchange_.receive());
  } else {
    backend_->copy(b.sum, parts + static_cast<std::size_t>(last) * btc, btc * sizeof(float));
    --last;
  }
  add_down(*backend_, b.sum, parts, last, btc);
  if (b.residual) residual_forward(b.sum, b.residual, b.sum, btc, *backend_);
}

namespace {

// A helper's buffers for one request: fresh allocations, as the owner's compact buffers are, each as large as the
// request's largest group needs.
struct HelpBuffers {
  std::vector<DeviceBuffer> in, out, scratch;
  DeviceBuffer part, acc;
  HelpBuffers(Backend& be, const std::vector<GroupShape>& shapes, std::size_t btc)
      : part(be, btc * sizeof(float)), acc(be, btc * sizeof(float)) {
    const auto most = [&](auto floats_of, std::size_t n) {
      std::vector<DeviceBuffer> bufs;
      for (std::size_t t = 0; t < n; ++t) {
        std::size_t floats = 0;
        for (const GroupShape& s : shapes) floats = std::max(floats, floats_of(s, t));
        bufs.emplace_back(be, floats * sizeof(float));
      }
      return bufs;
    };
    const GroupShape& any = shapes.front();
    in = most([](const GroupShape& s, std::size_t t) { return s.in[t].floats(); }, any.in.size());
    out = most([](const GroupShape& s, std::size_t t) { return s.out[t].floats(); }, any.out.size());
    scratch = most([](const GroupShape& s, std::size_t t) { return s.scratch[t]; }, any.scratch.size());
  }
};

// Group k's kernel arguments on a helper, from its part of the (staged) request at `at` (weight slices read in
// place, in blocks copied into the helper's compact buffers).
GroupArgs helper_args(Backend& be, const GroupShape& s, HelpBuffers& h, const float* input, const float* at) {
  check_shape(s);
  GroupArgs g;
  g.width = s.width;
  g.part = h.part.f();
  g.input = input;
  for (std::size_t i = 0; i < s.weights.size(); ++i) {
    g.w[i] = s.weights[i].n ? at : nullptr;
    at += s.weights[i].n;
  }
  for (std::size_t t = 0; t < s.in.size(); ++t) {
    g.in[t] = h.in[t].f();
    be.copy(g.in[t], at, s.in[t].floats() * sizeof(float));
    at += s.in[t].floats();
  }
  for (std::size_t t = 0; t < s.out.size(); ++t) g.out[t] = h.out[t].f();
  for (std::size_t t = 0; t < s.scratch.size(); ++t) g.scratch[t] = h.scratch[t].f();
  return g;
}

}  // namespace

// A helper's answer to a request for the last `groups` groups (grouped_request's layout): the groups' partial sum,
// added from the last group down as the owner adds them, then per group its first `returned` out tensors.
std::vector<float> StageModel::help_grouped(const GroupedPass& u, int groups, std::span<const float> request) const {
  check_groups(groups, "a helper's F or B");
  if (groups > u.groups) {
    throw Error("model: " + std::to_string(groups) + " groups asked of a helper's " + u.what + " (the unit has " +
                std::to_string(u.groups) + ")");
  }
  const std::size_t btc = static_cast<std::size_t>(dims_.BT()) * dims_.C;
  const int first = u.groups - groups;
  std::vector<GroupShape> shapes;
  std::vector<std::size_t> in_at, out_at;  // each group's offset in the request and in the answer
  std::size_t in_floats = btc, out_floats = btc;
  for (int k = first; k < u.groups; ++k) {
    const GroupShape& s = shapes.emplace_back(u.shape(k));
    in_at.push_back(in_floats);
    out_at.push_back(out_floats);
    for (const WeightSlice& ws : s.weights) in_floats += ws.n;
    for (const ColumnBlock& b : s.in) in_floats += b.floats();
    for (std::size_t t = 0; t < u.returned; ++t) out_floats += s.out[t].floats();
  }
  if (request.size() != in_floats) {
    throw Error(std::string("model: a helper's ") + u.what + " input of " + std::to_string(request.size()) +
                " floats (expected " + std::to_string(in_floats) + " for " + std::to_string(groups) + " groups)");
  }
  Backend& be = *backend_;
  const StagedRequest in(be, request);
  StagedAnswer answer(be, out_floats);
  HelpBuffers h(be, shapes, btc);
  for (std::size_t j = shapes.size(); j-- > 0;) {  // the fixed order of addition, from the last group down
    const GroupArgs g = helper_args(be, shapes[j], h, in.f(), in.f() + in_at[j]);
    u.kernel(be, dims_, g);
    if (j + 1 == shapes.size()) {
      be.copy(h.acc.f(), g.part, btc * sizeof(float));
    } else {
      residual_forward(h.acc.f(), g.part, h.acc.f(), btc, be);
    }
    float* to = answer.f() + out_at[j];
    for (std::size_t t = 0; t < u.returned; ++t) {
      be.copy(to, g.out[t], shapes[j].out[t].floats() * sizeof(float));
      to += shapes[j].out[t].floats();
    }
  }
  be.copy(answer.f(), h.acc.f(), btc * sizeof(float));
  return answer.take();
}

// The pass a request names in its last float (both units may move in one op: a request per unit and layer).
GroupedPass StageModel::grouped_pass(float unit, bool forward) const {
  if (unit == kHeadsRequest && head_groups_ > 1) return heads_pass(forward);
  if (unit == kMlpRequest && mlp_groups_ > 1) return mlp_pass(forward);
  throw Error(std::string("model: a helper's ") + (forward ? "F" : "B") + " request names unit " +
              std::to_string(unit) + ", which is not grouped here");
}

std::vector<float> StageModel::forward_help(int groups, const std::vector<float>& request) const {
  if (request.empty()) throw Error("model: an empty request to a helper's F");
  if (is_vocab_request(request)) {
    return vocab_forward_help(groups, {request.data(), request.size() - 1});  // stage_vocab.cpp
  }
  return help_grouped(grouped_pass(request.back(), true), groups, {request.data(), request.size() - 1});
}

std::vector<float> StageModel::backward_input_help(int groups, const std::vector<float>& request) const {
  if (request.empty()) throw Error("model: an empty request to a helper's B");
  if (is_vocab_request(request)) {
    return vocab_backward_input_help(groups, {request.data(), request.size() - 1});  // stage_vocab.cpp
  }
  return help_grouped(grouped_pass(request.back(), false), groups, {request.data(), request.size() - 1});
}

// ---- the units ----

namespace {

// MLP group: hidden columns [c0, c0 + nc) of fc1 and the matching rows of fc2 (width nc). F: h = ln2 fc_w^T + fc_b,
// gelu = GELU(h), p = gelu fcproj_w (+ fcproj_b: the group holds_output_bias names). B: dh = GELU'(h) (dout
// fcproj_w^T), q = dh fc_w.
void mlp_group_forward(Backend& be, const Dims& d, const GroupArgs& g) {
  matmul_forward(g.out[0], g.input, g.w[0], g.w[1], d.B, d.T, d.C, g.width, WeightLayout::out_in, Accumulate::no, be);
  gelu_forward(g.out[1], g.out[0], static_cast<std::size_t>(d.BT()) * g.width, be);
  matmul_forward(g.part, g.out[1], g.w[2], g.w[3], d.B, d.T, g.width, d.C, WeightLayout::in_out, Accumulate::no, be);
}
// The GELU output from the pre-activation, as mlp_group_forward computes it: the same elementwise kernel over a
// fresh compact buffer of the same length on either rank, so the same bits (Stage.RecomputedGeluIsTheHelpersBits).
void mlp_group_gelu(Backend& be, const Dims& d, const GroupArgs& g) {
  gelu_forward(g.out[1], g.out[0], static_cast<std::size_t>(d.BT()) * g.width, be);
}
void mlp_group_backward_input(Backend& be, const Dims& d, const GroupArgs& g) {
  matmul_backward_input(g.out[0], g.input, g.w[0], d.B, d.T, g.width, d.C, WeightLayout::in_out, Accumulate::no, be);
  gelu_backward(g.out[0], g.out[0], g.in[0], static_cast<std::size_t>(d.BT()) * g.width, be);
  matmul_backward_input(g.part, g.out[0], g.w[1], d.B, d.T, d.C, g.width, WeightLayout::out_in, Accumulate::no, be);
}

// Head group: heads [h0, h0 + ng) (width ng, ny = ng HS), their QKV columns, attention core and output-projection
// rows. F: qkv = ln1 qkv_w^T + qkv_b, the attention (y, lse), p = y proj_w (+ proj_b: the group holds_output_bias
// names). B: dy = dx2 proj_w^T, the attention's backward (dqkv; dy and delta its scratch), q = dqkv qkv_w.
void head_group_forward(Backend& be, const Dims& d, const GroupArgs& g) {
  const int ny = g.width * d.HS;
  matmul_forward(g.out[0], g.input, g.w[0], g.w[1], d.B, d.T, d.C, 3 * ny, WeightLayout::out_in, Accumulate::no, be);
  attention_forward(g.out[1], g.out[2], g.out[0], d.B, d.T, ny, g.width, be);
  matmul_forward(g.part, g.out[1], g.w[2], g.w[3], d.B, d.T, ny, d.C, WeightLayout::in_out, Accumulate::no, be);
}
void head_group_backward_input(Backend& be, const Dims& d, const GroupArgs& g) {
  const int ny = g.width * d.HS;
  float *dy = g.scratch[0], *delta = g.scratch[1];
  matmul_backward_input(dy, g.input, g.w[0], d.B, d.T, ny, d.C, WeightLayout::in_out, Accumulate::no, be);
  attention_backward(g.out[0], delta, dy, g.in[0], g.in[1], g.in[2], d.B, d.T, ny, g.width, be);
  matmul_backward_input(g.part, g.out[0], g.w[1], d.B, d.T, d.C, 3 * ny, WeightLayout::out_in, Accumulate::no, be);
}

std::size_t count(long n) { return static_cast<std::size_t>(n); }  // a non-negative int as a size

}  // namespace

// The MLP in column groups. F sends fc_w, fc_b, fcproj_w (and fcproj_b: the group holds_output_bias names) and keeps h
// and gelu; a helper returns h only and the owner recomputes gelu from it (mlp_group_gelu). B sends fcproj_w, fc_w and
// h, and keeps dh.
GroupedPass StageModel::mlp_pass(bool forward) const {
  GroupedPass u;
  u.unit = kMlpRequest;
  u.what = forward ? "MLP forward" : "MLP backward";
  u.groups = mlp_groups_;
  u.returned = 1;
  u.shape = [this, forward](int k) {
    const Dims& d = dims_;
    const int c0 = group_begin(k), nc = group_begin(k + 1) - c0;
    const WeightSlice rows{count(c0) * d.C, count(nc) * d.C};
    GroupShape s;
    s.width = nc;
    if (forward) {
      s.weights = {rows, {count(c0), count(nc)}, rows, {0, holds_output_bias(c0, c0 + nc) ? count(d.C) : 0}};
      s.out = {mlp_columns(d, c0, nc), mlp_columns(d, c0, nc)};
    } else {
      s.weights = {rows, rows};
      s.in = s.out = {mlp_columns(d, c0, nc)};
    }
    return s;
  };
  u.kernel = forward ? mlp_group_forward : mlp_group_backward_input;
  if (forward) u.rebuild = mlp_group_gelu;
  u.buffers = [this, forward](const LayerActs& a, const LayerView& w) {
    if (forward) {
      return PassBuffers{.input = a.ln2,
                         .sum = a.out,
                         .residual = a.x2,
                         .weights = {w.fc_w, w.fc_b, w.fcproj_w, w.fcproj_b},
                         .out = {a.mlp.h, a.mlp.gelu},
                         .compact_out = {group_h_.f(), group_gelu_.f()}};
    }
    return PassBuffers{.input = a.dout,
                       .sum = a.dln2,
                       .weights = {w.fcproj_w, w.fc_w},
                       .in = {a.mlp.h},
                       .out = {a.mlp.dh},
                       .compact_in = {group_h_.f()},
                       .compact_out = {group_dh_.f()}};
  };
  return u;
}

// The attention in head groups. F sends qkv_w, qkv_b, proj_w (and proj_b: the group holds_output_bias names) and keeps
// (and a helper returns) the group's stash, QKV, attention output and log-sum-exp. B sends proj_w, qkv_w and the stash,
// and keeps the QKV gradient.
GroupedPass StageModel::heads_pass(bool forward) const {
  GroupedPass u;
  u.unit = kHeadsRequest;
  u.what = forward ? "attention forward" : "attention backward";
  u.groups = head_groups_;
  u.returned = forward ? 3 : 1;
  u.shape = [this, forward](int k) {
    const Dims& d = dims_;
    const int h0 = head_begin(k), ng = head_begin(k + 1) - h0;
    const std::size_t y0 = count(h0) * d.HS, ny = count(ng) * d.HS;
    const std::array<ColumnBlock, 3> stash = head_stash(d, h0, ng);
    GroupShape s;
    s.width = ng;
    if (forward) {
      s.weights = {{3 * y0 * d.C, 3 * ny * d.C},
                   {3 * y0, 3 * ny},
                   {y0 * d.C, ny * d.C},
                   {0, holds_output_bias(h0, h0 + ng) ? count(d.C) : 0}};
      s.out.assign(stash.begin(), stash.end());
    } else {
      s.weights = {{y0 * d.C, ny * d.C}, {3 * y0 * d.C, 3 * ny * d.C}};
      s.in.assign(stash.begin(), stash.end());
      s.out = {stash[0]};
      s.scratch = {stash[1].floats(), stash[2].floats()};  // dy, delta
    }
    return s;
  };
  u.kernel = forward ? head_group_forward : head_group_backward_input;
  u.buffers = [this, forward](const LayerActs& a, const LayerView& w) {
    const std::vector<float*> stash = {a.attn.qkv, a.attn.y, a.attn.lse};
    const std::vector<float*> compact = {group_qkv_.f(), group_y_.f(), group_lse_.f()};
    if (forward) {
      return PassBuffers{.input = a.ln1,
                         .sum = a.x2,
                         .residual = a.x,
                         .weights = {w.qkv_w, w.qkv_b, w.proj_w, w.proj_b},
                         .out = stash,
                         .compact_out = compact};
    }
    return PassBuffers{.input = a.dx2,
                       .sum = a.dln1,
                       .weights = {w.proj_w, w.qkv_w},
                       .in = stash,
                       .out = {a.attn.dqkv},
                       .compact_in = compact,
                       .compact_out = {group_dqkv_.f()},
                       .scratch = {group_dy_.f(), group_delta_.f()}};
  };
  return u;
}

// One layer of F with either unit grouped: LN1, the attention (in head groups or whole), LN2, the MLP (in column
// groups or whole); the ungrouped parts are the trainer's own (block.hpp).
void StageModel::layer_forward_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  if (head_groups_ > 1) {
    layernorm_forward(a.ln1, a.mean1, a.rstd1, a.x, w.ln1_w, w.ln1_b, d.B, d.T, d.C, *backend_);
    run_grouped(heads_pass(true), a, w);
    layernorm_forward(a.ln2, a.mean2, a.rstd2, a.x2, w.ln2_w, w.ln2_b, d.B, d.T, d.C, *backend_);
  } else {
    layer_forward_before_mlp(*backend_, a, w, d);
  }
  if (mlp_groups_ > 1) {
    run_grouped(mlp_pass(true), a, w);
  } else {
    layer_forward_mlp(*backend_, a, w, d);
  }
}

// One layer of B likewise: the MLP (dln2), LN2, the attention (dln1), LN1.
void StageModel::layer_backward_input_grouped(const LayerActs& a, const LayerView& w) {
  const Dims& d = dims_;
  if (mlp_groups_ > 1) {
    run_grouped(mlp_pass(false), a, w);
  } else {
    layer_backward_input_mlp(*backend_, a, w, d);
  }
  if (head_groups_ > 1) {
    layer_backward_input_ln2(*backend_, a, w, d);
    run_grouped(heads_pass(false), a, w);
    layer_backward_input_ln1(*backend_, a, w, d);
  } else {
    layer_backward_input_after_mlp(*backend_, a, w, d);
  }
}

// ---- W in groups ----

namespace {

// Group k's buffers as W's kernel sees them: its gradient blocks (zeroed before the first W reaches them; null:
// none), the two inputs every group reads whole and its compact stash blocks.
struct WeightArgs {
  int width = 0;
  const float *ln = nullptr, *dout = nullptr;
  std::array<float*, GroupArgs::kMost> grads{};
  std::array<const float*, GroupArgs::kMost> in{};
};

// The trainer's kernels (block.hpp) on one group: MLP (in: GELU output, pre-activation gradient) and heads (in: QKV
// gradient, attention output).
void mlp_group_weight(Backend& be, const Dims& d, const WeightArgs& g) {
  MlpSliceBuffers buf;
  buf.gelu = const_cast<float*>(g.in[0]);  // read only: W reads its stash
  buf.dh = const_cast<float*>(g.in[1]);
  mlp_group_backward_weight(be, {g.grads[0], g.grads[1], g.grads[2], g.grads[3]}, buf, g.ln, g.dout, d, g.width);
}
void head_group_weight(Backend& be, const Dims& d, const WeightArgs& g) {
  AttnSliceBuffers buf;
  buf.dqkv = const_cast<float*>(g.in[0]);  // read only
  buf.y = const_cast<float*>(g.in[1]);
  head_group_backward_weight(be, {g.grads[0], g.grads[1], g.grads[2], g.grads[3]}, buf, g.ln, g.dout, d, g.width);
}

// The owner's buffers of one layer for a unit's W.
struct WeightBuffers {
  const float *ln = nullptr, *dout = nullptr;  // the inputs every group reads whole [BT, C]
  std::vector<float*> stash, compact;          // the layer's stash tensors W reads, the owner's compact buffers
};

}  // namespace

// One grouped unit's W, described group by group: the gradients of its F weight slices (the F pass's GroupShape
// weights: a group's gradient blocks) from two whole inputs and the group's stash blocks (GroupShape in).
struct WeightPass {
  int groups = 1;
  std::function<GroupShape(int k)> shape;
  std::function<void(Backend&, const Dims&, const WeightArgs&)> kernel;
  std::function<WeightBuffers(const LayerActs&)> buffers;          // the owner's, for one layer
  std::function<std::vector<float*>(const LayerView&)> gradients;  // a gradient slot's tensors of the unit
};

// The MLP's W: fc_w, fc_b, fcproj_w (fcproj_b: the group holds_output_bias names) from LN2's output, the MLP's output
// gradient and the group's GELU output and pre-activation gradient.
WeightPass StageModel::mlp_weight_pass() const {
  WeightPass u;
  u.groups = mlp_groups_;
  u.shape = [f = mlp_pass(true)](int k) {
    GroupShape s = f.shape(k);
    s.in = {s.out[1], s.out[1]};  // the GELU output's columns, and the pre-activation gradient's
    s.out.clear();
    return s;
  };
  u.kernel = mlp_group_weight;
  u.buffers = [this](const LayerActs& a) {
    return WeightBuffers{
        .ln = a.ln2, .dout = a.dout, .stash = {a.mlp.gelu, a.mlp.dh}, .compact = {group_gelu_.f(), group_dh_.f()}};
  };
  u.gradients = [](const LayerView& g) { return std::vector<float*>{g.fc_w, g.fc_b, g.fcproj_w, g.fcproj_b}; };
  return u;
}

// The attention's W: qkv_w, qkv_b, proj_w (proj_b: the group holds_output_bias names) from LN1's output, the attention
// output's gradient and the group's QKV gradient and attention output.
WeightPass StageModel::heads_weight_pass() const {
  WeightPass u;
  u.groups = head_groups_;
  u.shape = [f = heads_pass(true)](int k) {
    GroupShape s = f.shape(k);
    s.in = {s.out[0], s.out[1]};  // the QKV gradient's columns (the QKV's), and the attention output's
    s.out.clear();
    return s;
  };
  u.kernel = head_group_weight;
  u.buffers = [this](const LayerActs& a) {
    return WeightBuffers{
        .ln = a.ln1, .dout = a.dx2, .stash = {a.attn.dqkv, a.attn.y}, .compact = {group_dqkv_.f(), group_y_.f()}};
  };
  u.gradients = [](const LayerView& g) { return std::vector<float*>{g.qkv_w, g.qkv_b, g.proj_w, g.proj_b}; };
  return u;
}

// The grouped units' W, in the order of weight_inputs' and weight_grads' layouts.
std::vector<WeightPass> StageModel::weight_passes() const {
  std::vector<WeightPass> passes;
  if (mlp_groups_ > 1) passes.push_back(mlp_weight_pass());
  if (head_groups_ > 1) passes.push_back(heads_weight_pass());
  return passes;
}

// The owner's W of groups [0, groups_here) of a unit, on its compact buffers.
void StageModel::weight_groups(const WeightPass& u, const LayerActs& a, const LayerView& g, int groups_here) {
  const WeightBuffers b = u.buffers(a);
  const std::vector<float*> grads = u.gradients(g);
  for (int k = 0; k < groups_here; ++k) {
    const GroupShape s = u.shape(k);
    WeightArgs args;
    args.width = s.width;
    args.ln = b.ln;
    args.dout = b.dout;
    for (std::size_t i = 0; i < s.weights.size(); ++i) {
      args.grads[i] = s.weights[i].n ? grads[i] + s.weights[i].at : nullptr;
    }
    for (std::size_t t = 0; t < s.in.size(); ++t) {
      gather_block(*backend_, b.compact[t], b.stash[t], s.in[t]);
      args.in[t] = b.compact[t];
    }
    u.kernel(*backend_, dims_, args);
  }
}

void StageModel::mlp_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here) {
  weight_groups(mlp_weight_pass(), a, g, groups_here);
}

void StageModel::head_groups_backward_weight(const LayerActs& a, const LayerView& g, int groups_here) {
  weight_groups(heads_weight_pass(), a, g, groups_here);
}

std::size_t StageModel::weight_in_layer(int groups) const {
  const std::size_t btc = static_cast<std::size_t>(dims_.BT()) * dims_.C;
  std::size_t n = 0;
  for (const WeightPass& u : weight_passes()) {
    n += 2 * btc;
    for (int k = u.groups - groups; k < u.groups; ++k) {
      for (const ColumnBlock& b : u.shape(k).in) n += b.floats();
    }
  }
  return n;
}

std::size_t StageModel::weight_out_layer(int groups) const {
  std::size_t n = 0;
  for (const WeightPass& u : weight_passes()) {
    for (int k = u.groups - groups; k < u.groups; ++k) {
      for (const WeightSlice& ws : u.shape(k).weights) n += ws.n;
    }
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
  const std::size_t btc = static_cast<std::size_t>(dims_.BT()) * dims_.C;
  std::vector<float> out(static_cast<std::size_t>(s.n_layers) * weight_in_layer(groups));
  float* at = out.data();
  const std::vector<WeightPass> passes = weight_passes();
  for (int l = 0; l < s.n_layers; ++l) {
    for (const WeightPass& u : passes) {
      const WeightBuffers b = u.buffers(m.layers[l]);
      backend_->download(at, b.ln, btc * sizeof(float));
      backend_->download(at + btc, b.dout, btc * sizeof(float));
      at += 2 * btc;
      for (int k = u.groups - groups; k < u.groups; ++k) {
        const GroupShape g = u.shape(k);
        for (std::size_t t = 0; t < g.in.size(); ++t) {
          download_block(*backend_, at, b.stash[t], g.in[t]);
          at += g.in[t].floats();
        }
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

std::vector<float> StageModel::layer_weight_grads(int groups, std::span<const float> inputs) const {
  const int most = std::max(mlp_groups_, head_groups_);
  if (most < 2 || groups < 1 || groups > most) {
    throw Error("model: " + std::to_string(groups) + " groups asked of a helper (the model has " +
                std::to_string(most > 1 ? most : 0) + ")");
  }
  const std::size_t btc = static_cast<std::size_t>(dims_.BT()) * dims_.C, in_layer = weight_in_layer(groups);
  if (inputs.empty() || inputs.size() % in_layer != 0) {
    throw Error("model: a helper's weight-gradient input of " + std::to_string(inputs.size()) +
                " floats is not a whole number of layers of " + std::to_string(in_layer));
  }
  const std::size_t layers = inputs.size() / in_layer;
  // The kernels read the (staged) request in place and write the answer's blocks, zeroed as W's slot is.
  const StagedRequest staged(*backend_, inputs);
  StagedAnswer out(*backend_, layers * weight_out_layer(groups));
  const float* in = staged.f();
  float* at = out.f();
  const std::vector<WeightPass> passes = weight_passes();
  for (std::size_t l = 0; l < layers; ++l) {
    for (const WeightPass& u : passes) {
      WeightArgs args;
      args.ln = in;
      args.dout = in + btc;
      in += 2 * btc;
      for (int k = u.groups - groups; k < u.groups; ++k) {
        const GroupShape s = u.shape(k);
        args.width = s.width;
        for (std::size_t i = 0; i < s.weights.size(); ++i) {
          args.grads[i] = s.weights[i].n ? at : nullptr;
          at += s.weights[i].n;
        }
        for (std::size_t t = 0; t < s.in.size(); ++t) {
          args.in[t] = in;
          in += s.in[t].floats();
        }
        u.kernel(*backend_, dims_, args);
      }
    }
  }
  return out.take();
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
  const float* from = grads.data();
  const std::vector<WeightPass> passes = weight_passes();
  for (int l = 0; l < s.n_layers; ++l) {
    for (const WeightPass& u : passes) {
      const std::vector<float*> slot = u.gradients(s.held_back[i]->g[static_cast<std::size_t>(l)]);
      for (int k = u.groups - groups; k < u.groups; ++k) {
        const GroupShape g = u.shape(k);
        for (std::size_t t = 0; t < g.weights.size(); ++t) {
          if (g.weights[t].n == 0) continue;  // a block only another group holds
          backend_->upload(slot[t] + g.weights[t].at, from, g.weights[t].n * sizeof(float));
          from += g.weights[t].n;
        }
      }
    }
  }
  land_vocab_weight_grads(s, s.held_back[i]->buf.f(), groups, from);  // stage_vocab.cpp
  s.groups_away[i] = 0;
  s.waiting[i] = std::move(s.held_back[i]);
  add_slots_in_order(s);
}

}  // namespace conductor::model
