// The kernel functions on the CPU backend against plain loops in double: the matmul family's weight layouts and
// overwrite / accumulate modes, the fused attention against the materialised one it replaced (every score in a
// [T,T] matrix, softmax, then the products), and the kernels the trainer does not reach (residual_forward, the
// one-tensor sum_squares). Every other kernel is checked through the trainer (test_slices, test_oracle) and, on a GPU,
// against its CUDA implementation (tests/cuda/test_cuda_kernels.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "conductor/model/adamw.hpp"
#include "conductor/model/attention.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/crossentropy.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/matmul.hpp"

namespace {

using namespace conductor::model;

std::vector<float> randn(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// weight[o][c] of the product out = inp @ W^T, whichever way the weight is stored.
float weight_at(const std::vector<float>& w, WeightLayout layout, int o, int c, int C, int OC) {
  return layout == WeightLayout::out_in ? w[static_cast<std::size_t>(o) * C + c]
                                        : w[static_cast<std::size_t>(c) * OC + o];
}

constexpr int B = 2, T = 3, C = 5, OC = 7, N = B * T;
constexpr double kTol = 1e-5;  // fp32 sums of <= 7 terms of unit size, against double

class Matmul : public ::testing::TestWithParam<WeightLayout> {
 protected:
  Backend& be = cpu_backend();
  const std::vector<float> inp = randn(static_cast<std::size_t>(N) * C, 1), weight = randn(OC * C, 2),
                           bias = randn(OC, 3), dout = randn(static_cast<std::size_t>(N) * OC, 4);
};

TEST_P(Matmul, ForwardOverwritesOrAccumulatesAndAddsTheBias) {
  const WeightLayout layout = GetParam();
  const std::vector<float> before = randn(static_cast<std::size_t>(N) * OC, 5);
  for (const Accumulate acc : {Accumulate::no, Accumulate::yes}) {
    std::vector<float> out = before;
    matmul_forward(out.data(), inp.data(), weight.data(), bias.data(), B, T, C, OC, layout, acc, be);
    for (int n = 0; n < N; n++) {
      for (int o = 0; o < OC; o++) {
        double want = bias[o] + (acc == Accumulate::yes ? before[n * OC + o] : 0.0);
        for (int c = 0; c < C; c++)
          want += static_cast<double>(inp[n * C + c]) * weight_at(weight, layout, o, c, C, OC);
        EXPECT_NEAR(out[n * OC + o], want, kTol) << "n=" << n << " o=" << o;
      }
    }
  }
}

TEST_P(Matmul, BackwardInputIsDoutTimesTheWeight) {
  const WeightLayout layout = GetParam();
  const std::vector<float> before = randn(static_cast<std::size_t>(N) * C, 6);
  for (const Accumulate acc : {Accumulate::no, Accumulate::yes}) {
    std::vector<float> dinp = before;
    matmul_backward_input(dinp.data(), dout.data(), weight.data(), B, T, C, OC, layout, acc, be);
    for (int n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) {
        double want = acc == Accumulate::yes ? before[n * C + c] : 0.0;
        for (int o = 0; o < OC; o++)
          want += static_cast<double>(dout[n * OC + o]) * weight_at(weight, layout, o, c, C, OC);
        EXPECT_NEAR(dinp[n * C + c], want, kTol) << "n=" << n << " c=" << c;
      }
    }
  }
}

TEST_P(Matmul, BackwardWeightAccumulatesInTheWeightsLayoutAndSkipsANullBias) {
  const WeightLayout layout = GetParam();
  const std::vector<float> dw0 = randn(OC * C, 7), db0 = randn(OC, 8);
  std::vector<float> dw = dw0, db = db0;
  matmul_backward_weight(dw.data(), db.data(), dout.data(), inp.data(), B, T, C, OC, layout, be);
  std::vector<float> dw_only = dw0;
  matmul_backward_weight(dw_only.data(), nullptr, dout.data(), inp.data(), B, T, C, OC, layout, be);
  EXPECT_EQ(dw_only, dw);
  for (int o = 0; o < OC; o++) {
    double want_b = db0[o];
    for (int n = 0; n < N; n++) want_b += dout[n * OC + o];
    EXPECT_NEAR(db[o], want_b, kTol) << "o=" << o;
    for (int c = 0; c < C; c++) {
      double want = weight_at(dw0, layout, o, c, C, OC);
      for (int n = 0; n < N; n++) want += static_cast<double>(dout[n * OC + o]) * inp[n * C + c];
      EXPECT_NEAR(weight_at(dw, layout, o, c, C, OC), want, kTol) << "o=" << o << " c=" << c;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, Matmul, ::testing::Values(WeightLayout::out_in, WeightLayout::in_out),
                         [](const auto& info) { return info.param == WeightLayout::out_in ? "out_in" : "in_out"; });

TEST(Kernels, ResidualForwardAddsInPlace) {
  Backend& be = cpu_backend();
  const std::vector<float> a = randn(100, 9), b = randn(100, 10);
  std::vector<float> out = a;
  residual_forward(out.data(), out.data(), b.data(), out.size(), be);
  for (std::size_t i = 0; i < out.size(); i++) EXPECT_EQ(out[i], a[i] + b[i]);
}

// The vocabulary-parallel loss (G groups of columns, each a compact block): the loss and logit gradients of the
// whole-vocabulary softmax cross-entropy, within rounding, and M, S the whole row's max and sum of exponentials.
TEST(Kernels, VocabParallelLossIsTheCrossEntropy) {
  Backend& be = cpu_backend();
  constexpr int V = 11, G = 3;  // groups of 3, 4 and 4 columns
  const std::vector<float> logits = randn(static_cast<std::size_t>(N) * V, 30);
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (5 * i + 2) % V;  // in every group
  std::vector<float> losses(N), probs(logits.size());
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, be);
  const float dloss = 0.25f;
  crossentropy_backward(probs.data(), probs.data(), targets.data(), dloss, B, T, V, be);
  std::vector<std::vector<float>> blocks(G);
  std::vector<float> stats(3 * static_cast<std::size_t>(G) * N);
  for (int k = 0; k < G; ++k) {
    const int v0 = k * V / G, nv = (k + 1) * V / G - v0;
    for (int i = 0; i < N; ++i) {
      for (int v = 0; v < nv; ++v) blocks[k].push_back(logits[static_cast<std::size_t>(i) * V + v0 + v]);
    }
    float* st = stats.data() + 3 * N * k;
    vocab_stats_forward(st, st + N, st + 2 * N, blocks[k].data(), targets.data(), v0, B, T, nv, be);
  }
  std::vector<float> vlosses(N), M(N), S(N);
  vocab_loss_forward(vlosses.data(), M.data(), S.data(), stats.data(), targets.data(), G, V, B, T, be);
  for (int i = 0; i < N; ++i) {
    double mx = -1e30, sum = 0;
    for (int v = 0; v < V; ++v) mx = std::max<double>(mx, logits[static_cast<std::size_t>(i) * V + v]);
    for (int v = 0; v < V; ++v) sum += std::exp(logits[static_cast<std::size_t>(i) * V + v] - mx);
    EXPECT_EQ(M[i], static_cast<float>(mx)) << i;
    EXPECT_NEAR(S[i], sum, kTol * sum) << i;
    EXPECT_NEAR(vlosses[i], losses[i], kTol * std::max(1.0f, std::abs(losses[i]))) << i;
  }
  for (int k = 0; k < G; ++k) {
    const int v0 = k * V / G, nv = (k + 1) * V / G - v0;
    std::vector<float> d(blocks[k].size());
    vocab_dlogits_backward(d.data(), blocks[k].data(), targets.data(), M.data(), S.data(), dloss, v0, B, T, nv, be);
    for (int i = 0; i < N; ++i) {
      for (int v = 0; v < nv; ++v) {
        EXPECT_NEAR(d[static_cast<std::size_t>(i) * nv + v], probs[static_cast<std::size_t>(i) * V + v0 + v], kTol)
            << k << " " << i << " " << v;
      }
    }
  }
}

TEST(Kernels, SumSquaresEachEqualsOneByOne) {
  Backend& be = cpu_backend();
  const std::vector<std::size_t> sizes = {7, 0, 100003};
  std::vector<std::vector<float>> host;
  std::vector<const float*> xs;
  for (std::size_t i = 0; i < sizes.size(); i++) {
    host.push_back(randn(sizes[i], 20 + static_cast<unsigned>(i)));
    xs.push_back(host.back().data());
  }
  std::vector<double> each(sizes.size(), -1.0);
  sum_squares_each(each.data(), xs.data(), sizes.data(), static_cast<int>(sizes.size()), be);
  for (std::size_t i = 0; i < sizes.size(); i++) {
    double want = 0.0;
    for (float x : host[i]) want += static_cast<double>(x) * x;
    EXPECT_EQ(each[i], sum_squares(xs[i], sizes[i], be)) << i;
    EXPECT_NEAR(each[i], want, 1e-9 * (1.0 + want)) << i;
  }
}

}  // namespace

namespace {

// The materialised causal attention in double (the algorithm before the fused kernel): P = softmax(QK^T / sqrt(HS))
// row by row over j <= t, out = P V; backward dV = P^T dout, dP = dout V^T, dS = P (dP - rowsum(P dP)), dQ = dS K
// and dK = dS^T Q, both scaled. qkv (B,T,NH,3,HS), out / dout (B,T,NH*HS).
struct NaiveAttention {
  std::vector<double> out, lse, dqkv;
  NaiveAttention(const std::vector<float>& qkv, const std::vector<float>& dout, int B, int T, int NH, int HS) {
    const int C = NH * HS, C3 = 3 * C;
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    out.assign(static_cast<std::size_t>(B) * T * C, 0.0);
    lse.assign(static_cast<std::size_t>(B) * NH * T, 0.0);
    dqkv.assign(qkv.size(), 0.0);
    auto at = [&](int b, int t, int h, int part, int i) {
      return static_cast<std::size_t>(b) * T * C3 + static_cast<std::size_t>(t) * C3 + 3 * h * HS + part * HS + i;
    };
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        std::vector<double> P(static_cast<std::size_t>(T) * T, 0.0), dP(P.size(), 0.0);
        for (int t = 0; t < T; t++) {
          double m = -1e300, sum = 0;
          for (int j = 0; j <= t; j++) {
            double s = 0;
            for (int i = 0; i < HS; i++) s += double(qkv[at(b, t, h, 0, i)]) * qkv[at(b, j, h, 1, i)];
            P[t * T + j] = s * scale;
            m = std::max(m, P[t * T + j]);
          }
          for (int j = 0; j <= t; j++) sum += P[t * T + j] = std::exp(P[t * T + j] - m);
          for (int j = 0; j <= t; j++) P[t * T + j] /= sum;
          lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = m + std::log(sum);
          for (int i = 0; i < HS; i++) {
            double o = 0;
            for (int j = 0; j <= t; j++) o += P[t * T + j] * qkv[at(b, j, h, 2, i)];
            out[(static_cast<std::size_t>(b) * T + t) * C + h * HS + i] = o;
          }
        }
        for (int t = 0; t < T; t++) {
          const float* d = &dout[(static_cast<std::size_t>(b) * T + t) * C + h * HS];
          double rowsum = 0;
          for (int j = 0; j <= t; j++) {
            double dp = 0;
            for (int i = 0; i < HS; i++) {
              dp += double(d[i]) * qkv[at(b, j, h, 2, i)];
              dqkv[at(b, j, h, 2, i)] += P[t * T + j] * d[i];
            }
            dP[t * T + j] = dp;
            rowsum += P[t * T + j] * dp;
          }
          for (int j = 0; j <= t; j++) {
            const double ds = P[t * T + j] * (dP[t * T + j] - rowsum) * scale;
            for (int i = 0; i < HS; i++) {
              dqkv[at(b, t, h, 0, i)] += ds * qkv[at(b, j, h, 1, i)];
              dqkv[at(b, j, h, 1, i)] += ds * qkv[at(b, t, h, 0, i)];
            }
          }
        }
      }
    }
  }
};

// Largest |a - b| / max(|b|, floor) over the elements (floor: the scale of the tensor, so near-zero elements
// count by absolute error).
double max_rel_error(const std::vector<float>& a, const std::vector<double>& b) {
  double scale = 0, worst = 0;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < a.size(); i++) {
    worst = std::max(worst, std::abs(a[i] - b[i]) / std::max(std::abs(b[i]), 1e-2 * scale));
  }
  return worst;
}

// Sequences shorter and longer than the kernel's key block (64), so that the online softmax rescales; several
// heads; HS 16 and 64.
class FusedAttention : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(FusedAttention, MatchesTheMaterialisedAttentionWithin1e4) {
  const auto [T, NH, HS] = GetParam();
  const int B = 2, C = NH * HS;
  const std::vector<float> qkv = randn(static_cast<std::size_t>(B) * T * 3 * C, 7),
                           dout = randn(static_cast<std::size_t>(B) * T * C, 8);
  const NaiveAttention ref(qkv, dout, B, T, NH, HS);
  std::vector<float> out(ref.out.size()), lse(ref.lse.size()), delta(lse.size()), dqkv(qkv.size(), 123.0f);
  Backend& be = cpu_backend();
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, be);
  attention_backward(dqkv.data(), delta.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, be);
  EXPECT_LE(max_rel_error(out, ref.out), 1e-4);
  EXPECT_LE(max_rel_error(lse, ref.lse), 1e-4);
  EXPECT_LE(max_rel_error(dqkv, ref.dqkv), 1e-4);  // overwritten: the 123s are gone
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedAttention,
                         ::testing::Values(std::tuple{5, 2, 16}, std::tuple{64, 1, 16}, std::tuple{150, 3, 16},
                                           std::tuple{130, 2, 64}));

// The same inputs give the same bits on every call (ranks and schedules rely on it): no order depends on threads.
TEST(FusedAttentionDeterminism, RepeatedCallsGiveIdenticalBits) {
  const int B = 2, T = 97, NH = 3, HS = 16, C = NH * HS;
  const std::vector<float> qkv = randn(static_cast<std::size_t>(B) * T * 3 * C, 9),
                           dout = randn(static_cast<std::size_t>(B) * T * C, 10);
  std::vector<float> out[2], lse[2], delta(static_cast<std::size_t>(B) * NH * T), dqkv[2];
  for (int r = 0; r < 2; r++) {
    out[r].resize(dout.size());
    lse[r].resize(delta.size());
    dqkv[r].resize(qkv.size());
    attention_forward(out[r].data(), lse[r].data(), qkv.data(), B, T, C, NH, cpu_backend());
    attention_backward(dqkv[r].data(), delta.data(), dout.data(), qkv.data(), out[r].data(), lse[r].data(), B, T, C, NH,
                       cpu_backend());
  }
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(lse[0], lse[1]);
  EXPECT_EQ(dqkv[0], dqkv[1]);
}

}  // namespace
