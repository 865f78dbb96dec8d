// Slices of a layer (head groups of attention, column groups of the MLP) sum to the full layer in forward, in
// the input-gradient part (B) and in the weight-gradient part (W).
#include <gtest/gtest.h>

#include <array>

#include <cmath>
#include <random>
#include <vector>

#include "conductor/model/backend.hpp"
#include "conductor/model/block.hpp"

using namespace conductor::model;

namespace {

struct Rand {
  std::mt19937 gen{7};
  std::vector<float> vec(std::size_t n, float scale = 1.0f) {
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (auto& x : v) x = nd(gen);
    return v;
  }
};

double max_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < a.size(); i++) {
    num = std::max(num, static_cast<double>(std::fabs(a[i] - b[i])));
    den = std::max(den, static_cast<double>(std::fabs(b[i])));
  }
  return num / std::max(den, 1e-30);
}

// One layer's weights, gradients and slice buffers, host-side (the cpu backend uses host memory).
struct Layer {
  Dims d{2, 5, 16, 4, 4, 32, 11};
  std::vector<float> w[12], g[12];
  LayerView wv, gv;
  explicit Layer(Rand& r) {
    const int C = d.C, F = d.F;
    const std::size_t sizes[12] = {(size_t)C, (size_t)C, 3ul * C * C,   3ul * C,   (size_t)C * C, (size_t)C,
                                   (size_t)C, (size_t)C, (size_t)F * C, (size_t)F, (size_t)F * C, (size_t)C};
    for (int i = 0; i < 12; i++) {
      w[i] = r.vec(sizes[i], 0.3f);
      g[i].assign(sizes[i], 0.0f);
    }
    auto view = [](std::vector<float>* t) {
      return LayerView{t[0].data(), t[1].data(), t[2].data(), t[3].data(), t[4].data(),  t[5].data(),
                       t[6].data(), t[7].data(), t[8].data(), t[9].data(), t[10].data(), t[11].data()};
    };
    wv = view(w);
    gv = view(g);
  }
  void zero_grads() {
    for (auto& x : g) std::fill(x.begin(), x.end(), 0.0f);
  }
};

struct AttnBufs {
  std::vector<float> qkv, lse, y, dqkv, dy, delta;
  AttnSliceBuffers b;
  AttnBufs(const Dims& d, int ng) {
    const std::size_t bt = d.BT();
    qkv.resize(bt * 3 * ng * d.HS);
    dqkv.resize(qkv.size());
    lse.resize(static_cast<std::size_t>(d.B) * ng * d.T);
    delta.resize(lse.size());
    y.resize(bt * ng * d.HS);
    dy.resize(y.size());
    b = {qkv.data(), lse.data(), y.data(), dqkv.data(), dy.data(), delta.data()};
  }
};

struct MlpBufs {
  std::vector<float> h, gelu, dh;
  MlpSliceBuffers b;
  MlpBufs(const Dims& d, int nc) : h(d.BT() * nc), gelu(h.size()), dh(h.size()) {
    b = {h.data(), gelu.data(), dh.data()};
  }
};

}  // namespace

TEST(Slices, AttentionHeadGroupsSumToFullLayer) {
  Rand r;
  Layer L(r);
  Backend& be = cpu_backend();
  const Dims& d = L.d;
  const std::size_t btc = d.BT() * d.C;
  const auto ln = r.vec(btc), dout = r.vec(btc);
  // Full: one slice over all heads.
  AttnBufs full(d, d.NH);
  std::vector<float> out_full(btc, 0.0f), dln_full(btc, 0.0f);
  attention_slice_forward(be, out_full.data(), full.b, ln.data(), L.wv, d, 0, d.NH);
  attention_slice_backward_input(be, dln_full.data(), full.b, dout.data(), L.wv, d, 0, d.NH);
  attention_slice_backward_weight(be, L.gv, full.b, ln.data(), dout.data(), d, 0, d.NH);
  std::vector<std::vector<float>> g_full(L.g, L.g + 12);
  L.zero_grads();
  // Slices: heads {0}, {1, 2}, {3}, each with its own buffers, summed.
  std::vector<float> out_sum(btc, 0.0f), dln_sum(btc, 0.0f);
  const int groups[][2] = {{0, 1}, {1, 3}, {3, 4}};
  for (const auto& gr : groups) {
    AttnBufs s(d, gr[1] - gr[0]);
    std::vector<float> out(btc, 0.0f), dln(btc, 0.0f);
    attention_slice_forward(be, out.data(), s.b, ln.data(), L.wv, d, gr[0], gr[1]);
    attention_slice_backward_input(be, dln.data(), s.b, dout.data(), L.wv, d, gr[0], gr[1]);
    attention_slice_backward_weight(be, L.gv, s.b, ln.data(), dout.data(), d, gr[0], gr[1]);
    for (std::size_t i = 0; i < btc; i++) {
      out_sum[i] += out[i];
      dln_sum[i] += dln[i];
    }
  }
  EXPECT_LT(max_rel(out_sum, out_full), 1e-5);
  EXPECT_LT(max_rel(dln_sum, dln_full), 1e-5);
  const char* names[12] = {"ln1_w", "ln1_b", "qkv_w", "qkv_b", "proj_w",   "proj_b",
                           "ln2_w", "ln2_b", "fc_w",  "fc_b",  "fcproj_w", "fcproj_b"};
  for (int i : {2, 3, 4, 5}) EXPECT_LT(max_rel(L.g[i], g_full[i]), 1e-5) << names[i];
  // The full gradients are not trivially zero, and a slice alone does not give the whole output.
  EXPECT_GT(max_rel(g_full[2], std::vector<float>(g_full[2].size(), 0.0f)), 0.5);
  AttnBufs one(d, 1);
  std::vector<float> out_one(btc, 0.0f);
  attention_slice_forward(be, out_one.data(), one.b, ln.data(), L.wv, d, 0, 1);
  EXPECT_GT(max_rel(out_one, out_full), 1e-2);
}

namespace {

// The MLP computed whole and as the column groups [c0, c1) of `groups`, each with its own buffers: the groups'
// outputs, input gradients and weight gradients sum to the whole layer's.
void expect_mlp_groups_sum_to_full_layer(const std::vector<std::array<int, 2>>& groups) {
  Rand r;
  Layer L(r);
  Backend& be = cpu_backend();
  const Dims& d = L.d;
  const std::size_t btc = d.BT() * d.C;
  const auto ln = r.vec(btc), dout = r.vec(btc);
  MlpBufs full(d, d.F);
  std::vector<float> out_full(btc, 0.0f), dln_full(btc, 0.0f);
  mlp_slice_forward(be, out_full.data(), full.b, ln.data(), L.wv, d, 0, d.F);
  mlp_slice_backward_input(be, dln_full.data(), full.b, dout.data(), L.wv, d, 0, d.F);
  mlp_slice_backward_weight(be, L.gv, full.b, ln.data(), dout.data(), d, 0, d.F);
  std::vector<std::vector<float>> g_full(L.g, L.g + 12);
  L.zero_grads();
  std::vector<float> out_sum(btc, 0.0f), dln_sum(btc, 0.0f);
  for (const auto& gr : groups) {
    MlpBufs s(d, gr[1] - gr[0]);
    std::vector<float> out(btc, 0.0f), dln(btc, 0.0f);
    mlp_slice_forward(be, out.data(), s.b, ln.data(), L.wv, d, gr[0], gr[1]);
    mlp_slice_backward_input(be, dln.data(), s.b, dout.data(), L.wv, d, gr[0], gr[1]);
    mlp_slice_backward_weight(be, L.gv, s.b, ln.data(), dout.data(), d, gr[0], gr[1]);
    for (std::size_t i = 0; i < btc; i++) {
      out_sum[i] += out[i];
      dln_sum[i] += dln[i];
    }
  }
  EXPECT_LT(max_rel(out_sum, out_full), 1e-5);
  EXPECT_LT(max_rel(dln_sum, dln_full), 1e-5);
  for (int i : {8, 9, 10, 11}) EXPECT_LT(max_rel(L.g[i], g_full[i]), 1e-5) << i;
  EXPECT_GT(max_rel(g_full[8], std::vector<float>(g_full[8].size(), 0.0f)), 0.5);
}

}  // namespace

TEST(Slices, MlpColumnGroupsSumToFullLayer) { expect_mlp_groups_sum_to_full_layer({{0, 5}, {5, 20}, {20, 32}}); }

// Groups cut with empty ones among them (an empty first group [0, 0) included): the output projection's bias is
// added and its gradient accumulated once, by the non-empty group at column 0 (holds_output_bias). Before, the
// group that starts at column 0 took it, so an empty first group and the next one both did.
TEST(Slices, EmptyGroupsNeverTakeTheOutputBias) {
  expect_mlp_groups_sum_to_full_layer({{0, 0}, {0, 20}, {20, 20}, {20, 32}});
  static_assert(holds_output_bias(0, 1) && !holds_output_bias(0, 0) && !holds_output_bias(1, 2));
}

TEST(Slices, SliceWeightsAreContiguousBlocks) {
  // A slice reads only its own block: poisoning every other head's weights leaves its output unchanged.
  Rand r;
  Layer L(r);
  Backend& be = cpu_backend();
  const Dims& d = L.d;
  const std::size_t btc = d.BT() * d.C;
  const auto ln = r.vec(btc);
  AttnBufs s(d, 2);
  std::vector<float> before(btc, 0.0f), after(btc, 0.0f);
  attention_slice_forward(be, before.data(), s.b, ln.data(), L.wv, d, 1, 3);
  const std::size_t q0 = 3ul * 1 * d.HS * d.C, q1 = 3ul * 3 * d.HS * d.C;
  for (std::size_t i = 0; i < L.w[2].size(); i++) {
    if (i < q0 || i >= q1) L.w[2][i] = 1e6f;
  }
  for (std::size_t i = 0; i < L.w[4].size(); i++) {
    const std::size_t row = i / d.C;
    if (row < 1ul * d.HS || row >= 3ul * d.HS) L.w[4][i] = 1e6f;
  }
  attention_slice_forward(be, after.data(), s.b, ln.data(), L.wv, d, 1, 3);
  EXPECT_EQ(before, after);
}
