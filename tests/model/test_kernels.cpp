// The kernel functions on the CPU backend against plain loops in double: the matmul family's weight layouts and
// overwrite / accumulate modes, and the kernels the trainer does not reach (residual_forward, the one-tensor
// sum_squares). Every other kernel is checked through the trainer (test_slices, test_oracle) and, on a GPU,
// against its CUDA implementation (tests/cuda/test_cuda_kernels.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "conductor/model/adamw.hpp"
#include "conductor/model/backend.hpp"
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
