// Every model kernel's CUDA implementation against its CPU implementation (the reference) on random inputs: the
// same kernel call, once with the CPU backend and once with a CudaBackend.
// Error measure: norm-wise relative error ||gpu - cpu||_2 / ||cpu||_2 over the whole output tensor.
// fp32 bound 1e-5: both sides compute the same formulas in fp32 and differ only in summation order (cuBLAS vs
// OpenBLAS blocking, warp trees vs sequential loops), which for these sizes (sums of <= ~1000 terms) stays
// below ~1e-6; a wrong index, mask or transpose gives errors of order 1.
// bf16 bounds are given at each test with their reason.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <random>
#include <vector>

#include "../model/model_test_util.hpp"
#include "conductor/model/adamw.hpp"
#include "conductor/model/attention.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/crossentropy.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/model/encoder.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"
#include "conductor/runtime/cuda/gpu_clock.hpp"

namespace {

using namespace conductor::model;  // the kernels, Backend, DeviceBuffer
namespace cu = conductor::model::cuda;

constexpr double kFp32Tol = 1e-5;

std::vector<float> randn(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<int> randint(std::size_t n, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, hi - 1);
  std::vector<int> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

using model_test::rel_err;

class CudaKernels : public ::testing::Test {
 protected:
  explicit CudaKernels(cu::CudaOptions options = {}) : gpu(options) {}
  float* up(const std::vector<float>& h) {
    bufs.emplace_back(gpu, h.size() * sizeof(float));
    gpu.upload(bufs.back().get(), h.data(), h.size() * sizeof(float));
    return bufs.back().f();
  }
  int* up(const std::vector<int>& h) {
    bufs.emplace_back(gpu, h.size() * sizeof(int));
    gpu.upload(bufs.back().get(), h.data(), h.size() * sizeof(int));
    return bufs.back().i();
  }
  std::vector<float> down(const float* d, std::size_t n) {
    std::vector<float> h(n);
    gpu.download(h.data(), d, n * sizeof(float));
    return h;
  }

  cu::CudaBackend gpu;  // declared before bufs: the buffers are released first
  Backend& cpu = cpu_backend();
  std::deque<DeviceBuffer> bufs;
};

class CudaKernelsBf16 : public CudaKernels {
 protected:
  CudaKernelsBf16() : CudaKernels(cu::CudaOptions{-1, cu::Precision::bf16, false}) {}
};

// Every direction in both weight layouts covers each transpose combination cuBLAS is called with; shapes are
// deliberately not multiples of anything.
constexpr WeightLayout kLayouts[] = {WeightLayout::out_in, WeightLayout::in_out};
constexpr Accumulate kWrites[] = {Accumulate::no, Accumulate::yes};

TEST_F(CudaKernels, MatmulForwardBothLayoutsWithBias) {
  const int B = 3, T = 13, C = 29, OC = 53;
  const std::size_t n_out = static_cast<std::size_t>(B) * T * OC;
  const auto inp = randn(static_cast<std::size_t>(B) * T * C, 1), weight = randn(static_cast<std::size_t>(OC) * C, 2);
  const auto bias = randn(OC, 3), out0 = randn(n_out, 4);
  for (const WeightLayout layout : kLayouts) {
    for (const Accumulate acc : kWrites) {
      for (const bool with_bias : {false, true}) {
        std::vector<float> out = out0;
        const float* b = with_bias ? bias.data() : nullptr;
        matmul_forward(out.data(), inp.data(), weight.data(), b, B, T, C, OC, layout, acc, cpu);
        float* dout = up(out0);
        matmul_forward(dout, up(inp), up(weight), with_bias ? up(bias) : nullptr, B, T, C, OC, layout, acc, gpu);
        EXPECT_LE(rel_err(down(dout, n_out), out), kFp32Tol)
            << "in_out=" << (layout == WeightLayout::in_out) << " accumulate=" << (acc == Accumulate::yes)
            << " bias=" << with_bias;
      }
    }
  }
}

TEST_F(CudaKernels, MatmulBackwardInputBothLayouts) {
  const int B = 2, T = 19, C = 37, OC = 41;
  const std::size_t n_inp = static_cast<std::size_t>(B) * T * C;
  const auto dout = randn(static_cast<std::size_t>(B) * T * OC, 5), weight = randn(static_cast<std::size_t>(OC) * C, 6);
  const auto dinp0 = randn(n_inp, 7);
  for (const WeightLayout layout : kLayouts) {
    for (const Accumulate acc : kWrites) {
      std::vector<float> dinp = dinp0;
      matmul_backward_input(dinp.data(), dout.data(), weight.data(), B, T, C, OC, layout, acc, cpu);
      float* ddinp = up(dinp0);
      matmul_backward_input(ddinp, up(dout), up(weight), B, T, C, OC, layout, acc, gpu);
      EXPECT_LE(rel_err(down(ddinp, n_inp), dinp), kFp32Tol)
          << "in_out=" << (layout == WeightLayout::in_out) << " accumulate=" << (acc == Accumulate::yes);
    }
  }
}

TEST_F(CudaKernels, MatmulBackwardWeightBothLayouts) {
  const int B = 4, T = 150, C = 31, OC = 70;  // 600 rows: three row chunks in the bias column reduction
  const std::size_t nw = static_cast<std::size_t>(OC) * C;
  const auto dout = randn(static_cast<std::size_t>(B) * T * OC, 8), inp = randn(static_cast<std::size_t>(B) * T * C, 9);
  const auto dw0 = randn(nw, 10), db0 = randn(OC, 11);
  for (const WeightLayout layout : kLayouts) {
    std::vector<float> dw = dw0, db = db0;
    matmul_backward_weight(dw.data(), db.data(), dout.data(), inp.data(), B, T, C, OC, layout, cpu);
    float *ddw = up(dw0), *ddb = up(db0);
    matmul_backward_weight(ddw, ddb, up(dout), up(inp), B, T, C, OC, layout, gpu);
    EXPECT_LE(rel_err(down(ddw, nw), dw), kFp32Tol) << "in_out=" << (layout == WeightLayout::in_out);
    EXPECT_LE(rel_err(down(ddb, OC), db), kFp32Tol) << "in_out=" << (layout == WeightLayout::in_out);
  }
}

TEST_F(CudaKernels, MatmulWithEmptyInnerDimension) {
  // C = 0: an overwriting product writes zeros (NaNs in out do not survive, as with BLAS), an accumulating one
  // leaves out as it was.
  const int B = 1, T = 5, OC = 7;
  auto out0 = randn(static_cast<std::size_t>(T) * OC, 12);
  out0[3] = std::nanf("");
  for (const Accumulate acc : kWrites) {
    std::vector<float> out = out0;
    matmul_forward(out.data(), nullptr, nullptr, nullptr, B, T, 0, OC, WeightLayout::out_in, acc, cpu);
    float* dout = up(out0);
    matmul_forward(dout, nullptr, nullptr, nullptr, B, T, 0, OC, WeightLayout::out_in, acc, gpu);
    const auto got = down(dout, out.size());
    for (std::size_t i = 0; i < out.size(); i++) {
      if (acc == Accumulate::no) {
        EXPECT_EQ(out[i], 0.0f) << i;
      }
      if (std::isnan(out[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        EXPECT_EQ(got[i], out[i]) << i;
      }
    }
  }
}

TEST_F(CudaKernels, EncoderForwardAndBackward) {
  struct Case {
    int B, T, C, V;
  };
  // The second case has ~400 occurrences per token: more than one batch of matches in the dwte kernel.
  for (const Case cs : {Case{3, 7, 40, 5}, Case{4, 300, 24, 3}}) {
    const int B = cs.B, T = cs.T, C = cs.C, V = cs.V;
    const auto tokens = randint(static_cast<std::size_t>(B) * T, V, 21);
    const auto wte = randn(static_cast<std::size_t>(V) * C, 22), wpe = randn(static_cast<std::size_t>(T) * C, 23);
    std::vector<float> out(static_cast<std::size_t>(B) * T * C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C, cpu);
    int* dtok = up(tokens);
    float* dout = up(randn(out.size(), 24));  // garbage: the kernel overwrites
    encoder_forward(dout, dtok, up(wte), up(wpe), B, T, C, gpu);
    EXPECT_LE(rel_err(down(dout, out.size()), out), kFp32Tol) << "B=" << B << " T=" << T;

    const auto g = randn(out.size(), 25), dwte0 = randn(wte.size(), 26), dwpe0 = randn(wpe.size(), 27);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    encoder_backward(dwte.data(), dwpe.data(), g.data(), tokens.data(), B, T, C, cpu);
    float *ddwte = up(dwte0), *ddwpe = up(dwpe0);
    encoder_backward(ddwte, ddwpe, up(g), dtok, B, T, C, gpu);
    EXPECT_LE(rel_err(down(ddwte, dwte.size()), dwte), kFp32Tol) << "B=" << B << " T=" << T;
    EXPECT_LE(rel_err(down(ddwpe, dwpe.size()), dwpe), kFp32Tol) << "B=" << B << " T=" << T;
  }
}

TEST_F(CudaKernels, LayerNormForwardAndBackward) {
  const int B = 2, T = 150, C = 70, N = B * T;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const auto inp = randn(n, 31, 2.0f), w = randn(C, 32), b = randn(C, 33);
  std::vector<float> out(n), mean(N), rstd(N);
  layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C, cpu);
  float *dout = up(std::vector<float>(n)), *dmean = up(std::vector<float>(N)), *drstd = up(std::vector<float>(N));
  float *dinp = up(inp), *dw = up(w);
  layernorm_forward(dout, dmean, drstd, dinp, dw, up(b), B, T, C, gpu);
  EXPECT_LE(rel_err(down(dout, n), out), kFp32Tol);
  EXPECT_LE(rel_err(down(dmean, N), mean), kFp32Tol);
  EXPECT_LE(rel_err(down(drstd, N), rstd), kFp32Tol);

  // Backward from the CPU's mean / rstd on both sides, so each kernel is compared on identical inputs.
  const auto g = randn(n, 34), dx0 = randn(n, 35);
  float *dg = up(g), *dm = up(mean), *dr = up(rstd);
  std::vector<float> dx = dx0;
  layernorm_backward_input(dx.data(), g.data(), inp.data(), w.data(), mean.data(), rstd.data(), B, T, C, cpu);
  float* ddx = up(dx0);
  layernorm_backward_input(ddx, dg, dinp, dw, dm, dr, B, T, C, gpu);
  EXPECT_LE(rel_err(down(ddx, n), dx), kFp32Tol);

  const auto dw0 = randn(C, 36), db0 = randn(C, 37);
  std::vector<float> gw = dw0, gb = db0;
  layernorm_backward_weight(gw.data(), gb.data(), g.data(), inp.data(), mean.data(), rstd.data(), B, T, C, cpu);
  float *dgw = up(dw0), *dgb = up(db0);
  layernorm_backward_weight(dgw, dgb, dg, dinp, dm, dr, B, T, C, gpu);
  EXPECT_LE(rel_err(down(dgw, C), gw), kFp32Tol);
  EXPECT_LE(rel_err(down(dgb, C), gb), kFp32Tol);
}

// The fused attention against the CPU's (the same algorithm: online softmax, log-sum-exp kept, probabilities
// recomputed in the backward); T across several tiles of 32 and 16 rows, every supported head size.
TEST_F(CudaKernels, AttentionForwardAndBackward) {
  struct Case {
    int B, T, NH, HS;
  };
  for (const Case cs : {Case{2, 33, 3, 16}, Case{1, 64, 2, 8}, Case{2, 1, 2, 4}, Case{1, 130, 2, 64},
                        Case{1, 45, 1, 128}, Case{2, 70, 2, 32}}) {
    const int B = cs.B, T = cs.T, NH = cs.NH, HS = cs.HS, C = NH * HS;
    const std::size_t nqkv = static_cast<std::size_t>(B) * T * NH * 3 * HS, ny = nqkv / 3;
    const std::size_t nlse = static_cast<std::size_t>(B) * NH * T;
    const auto qkv = randn(nqkv, 41);
    std::vector<float> out(ny), lse(nlse);
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, cpu);
    float *dqkv_in = up(qkv), *dout = up(randn(ny, 42)), *dlse = up(randn(nlse, 43));  // garbage outputs
    attention_forward(dout, dlse, dqkv_in, B, T, C, NH, gpu);
    EXPECT_LE(rel_err(down(dout, ny), out), kFp32Tol) << "T=" << T << " HS=" << HS;
    EXPECT_LE(rel_err(down(dlse, nlse), lse), kFp32Tol) << "T=" << T << " HS=" << HS;

    const auto g = randn(ny, 44);
    std::vector<float> dqkv(nqkv), delta(nlse);
    attention_backward(dqkv.data(), delta.data(), g.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, cpu);
    float* ddqkv = up(randn(nqkv, 45));  // garbage: overwritten
    attention_backward(ddqkv, up(randn(nlse, 46)), up(g), dqkv_in, up(out), up(lse), B, T, C, NH, gpu);
    EXPECT_LE(rel_err(down(ddqkv, nqkv), dqkv), kFp32Tol) << "T=" << T << " HS=" << HS;
  }
}

TEST_F(CudaKernels, GeluAndResidual) {
  const std::size_t n = 10007;
  const auto x = randn(n, 51, 2.0f), y = randn(n, 52);
  std::vector<float> out(n);
  gelu_forward(out.data(), x.data(), n, cpu);
  float *dx = up(x), *dout = up(std::vector<float>(n));
  gelu_forward(dout, dx, n, gpu);
  EXPECT_LE(rel_err(down(dout, n), out), kFp32Tol);

  std::vector<float> d = y;  // dinp aliases dout, as the MLP slice calls it
  gelu_backward(d.data(), d.data(), x.data(), n, cpu);
  float* dd = up(y);
  gelu_backward(dd, dd, dx, n, gpu);
  EXPECT_LE(rel_err(down(dd, n), d), kFp32Tol);

  std::vector<float> r = x;  // out aliases a
  residual_forward(r.data(), r.data(), y.data(), n, cpu);
  float* dr = up(x);
  residual_forward(dr, dr, up(y), n, gpu);
  EXPECT_LE(rel_err(down(dr, n), r), kFp32Tol);
}

TEST_F(CudaKernels, CrossEntropyForwardAndBackward) {
  const int B = 2, T = 5, V = 1000, N = B * T;
  const std::size_t n = static_cast<std::size_t>(N) * V;
  const auto logits = randn(n, 61, 3.0f);
  const auto targets = randint(N, V, 62);
  std::vector<float> losses(N), probs(n);
  crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V, cpu);
  float *dl = up(std::vector<float>(N)), *dp = up(std::vector<float>(n));
  int* dt = up(targets);
  crossentropy_forward(dl, dp, up(logits), dt, B, T, V, gpu);
  EXPECT_LE(rel_err(down(dl, N), losses), kFp32Tol);
  EXPECT_LE(rel_err(down(dp, n), probs), kFp32Tol);

  const float dloss = 0.5f / N;
  crossentropy_backward(probs.data(), probs.data(), targets.data(), dloss, B, T, V, cpu);  // in place, as the stage
  crossentropy_backward(dp, dp, dt, dloss, B, T, V, gpu);
  EXPECT_LE(rel_err(down(dp, n), probs), kFp32Tol);
}

// The vocabulary-parallel loss's kernels (LM-head vocabulary groups): per group statistics, their combination in
// group order, and the groups' logit gradients, against the cpu's; and a group's statistics are the same bits in two
// launches (the owner's and a helper's).
TEST_F(CudaKernels, VocabParallelLoss) {
  const int B = 2, T = 5, V = 1000, G = 3, N = B * T;
  const auto targets = randint(N, V, 82);
  int* dt = up(targets);
  std::vector<float> stats(3 * static_cast<std::size_t>(G) * N);
  float* dstats = up(stats);
  std::vector<std::vector<float>> group_logits;
  for (int k = 0; k < G; ++k) {
    const int v0 = k * V / G, nv = (k + 1) * V / G - v0;
    group_logits.push_back(randn(static_cast<std::size_t>(N) * nv, 83 + k, 3.0f));
    float* st = stats.data() + 3 * N * k;
    vocab_stats_forward(st, st + N, st + 2 * N, group_logits[k].data(), targets.data(), v0, B, T, nv, cpu);
    float* dst = dstats + 3 * N * k;
    float* dl = up(group_logits[k]);
    vocab_stats_forward(dst, dst + N, dst + 2 * N, dl, dt, v0, B, T, nv, gpu);
    const std::vector<float> once = down(dst, 3 * static_cast<std::size_t>(N));
    vocab_stats_forward(dst, dst + N, dst + 2 * N, dl, dt, v0, B, T, nv, gpu);
    EXPECT_EQ(down(dst, 3 * static_cast<std::size_t>(N)), once) << k;
    EXPECT_LE(rel_err(once, std::vector<float>(st, st + 3 * N)), kFp32Tol) << k;
  }
  std::vector<float> losses(N), M(N), S(N);
  vocab_loss_forward(losses.data(), M.data(), S.data(), stats.data(), targets.data(), G, V, B, T, cpu);
  float *dlosses = up(std::vector<float>(N)), *dM = up(std::vector<float>(N)), *dS = up(std::vector<float>(N));
  vocab_loss_forward(dlosses, dM, dS, up(stats), dt, G, V, B, T, gpu);
  EXPECT_LE(rel_err(down(dlosses, N), losses), kFp32Tol);
  EXPECT_LE(rel_err(down(dM, N), M), kFp32Tol);
  EXPECT_LE(rel_err(down(dS, N), S), kFp32Tol);
  const float dloss = 0.5f / N;
  for (int k = 0; k < G; ++k) {
    const int v0 = k * V / G, nv = (k + 1) * V / G - v0;
    const std::size_t n = static_cast<std::size_t>(N) * nv;
    std::vector<float> d(n);
    vocab_dlogits_backward(d.data(), group_logits[k].data(), targets.data(), M.data(), S.data(), dloss, v0, B, T, nv,
                           cpu);
    float* dd = up(std::vector<float>(n));
    vocab_dlogits_backward(dd, up(group_logits[k]), dt, up(M), up(S), dloss, v0, B, T, nv, gpu);
    EXPECT_LE(rel_err(down(dd, n), d), kFp32Tol) << k;
  }
}

TEST_F(CudaKernels, AdamW) {
  const std::size_t n = 10000;
  const auto p0 = randn(n, 71), m0 = randn(n, 72, 0.01f), g = randn(n, 73, 0.1f);
  auto v0 = randn(n, 74, 0.01f);
  for (auto& x : v0) x = x * x;
  std::vector<float> p = p0, m = m0, v = v0;
  const AdamWStep step{
      .lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_scale = 0.8f, .t = 3};
  adamw_update(p.data(), m.data(), v.data(), g.data(), n, step, cpu);
  float *dp = up(p0), *dm = up(m0), *dv = up(v0);
  adamw_update(dp, dm, dv, up(g), n, step, gpu);
  EXPECT_LE(rel_err(down(dp, n), p), kFp32Tol);
  EXPECT_LE(rel_err(down(dm, n), m), kFp32Tol);
  EXPECT_LE(rel_err(down(dv, n), v), kFp32Tol);
}

TEST_F(CudaKernels, SumSquaresMatchesAndIsDeterministic) {
  for (const std::size_t n : {std::size_t{5}, std::size_t{3000007}}) {
    const auto x = randn(n, 81);
    const double ref = sum_squares(x.data(), n, cpu);
    float* dx = up(x);
    const double a = sum_squares(dx, n, gpu), b = sum_squares(dx, n, gpu);
    EXPECT_LE(std::abs(a - ref) / ref, 1e-12) << "n=" << n;  // both accumulate fp32 squares in double
    EXPECT_EQ(a, b) << "n=" << n;
  }
}

TEST_F(CudaKernels, SumSquaresEachEqualsOneByOne) {
  // Several tensors (one empty) in one round trip: each result equals the single-tensor call bit for bit.
  const std::vector<std::size_t> sizes = {7, 0, 100003, 64, 2000001};
  std::vector<std::vector<float>> host;
  std::vector<const float*> xs;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    host.push_back(randn(sizes[i], 100 + static_cast<unsigned>(i)));
    xs.push_back(sizes[i] ? up(host.back()) : nullptr);
  }
  std::vector<double> each(sizes.size(), -1.0);
  sum_squares_each(each.data(), xs.data(), sizes.data(), static_cast<int>(sizes.size()), gpu);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double one = sizes[i] ? sum_squares(xs[i], sizes[i], gpu) : 0.0;
    EXPECT_EQ(each[i], one) << "tensor " << i;
    if (sizes[i]) {
      EXPECT_LE(std::abs(each[i] - sum_squares(host[i].data(), sizes[i], cpu)) / one, 1e-12);
    }
  }
}

TEST_F(CudaKernels, ReductionsAreBitwiseDeterministic) {
  const int B = 4, T = 300, C = 48, V = 7, N = B * T;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const auto g = randn(n, 91), inp = randn(n, 92), mean = randn(N, 93), rstd = randn(N, 94);
  const auto tokens = randint(N, V, 95);
  float *dg = up(g), *di = up(inp), *dm = up(mean), *dr = up(rstd);
  int* dt = up(tokens);
  std::vector<float> first;
  for (int rep = 0; rep < 2; rep++) {
    float *db = up(std::vector<float>(C)), *dw = up(std::vector<float>(C)), *dlb = up(std::vector<float>(C));
    float *dwte = up(std::vector<float>(static_cast<std::size_t>(V) * C)), *dwpe = up(std::vector<float>(T * C));
    float* dmw = up(std::vector<float>(static_cast<std::size_t>(C) * C));
    matmul_backward_weight(dmw, db, dg, di, B, T, C, C, WeightLayout::out_in, gpu);
    layernorm_backward_weight(dw, dlb, dg, di, dm, dr, B, T, C, gpu);
    encoder_backward(dwte, dwpe, dg, dt, B, T, C, gpu);
    std::vector<float> all;
    for (auto [p, len] : {std::pair{db, C}, {dmw, C * C}, {dw, C}, {dlb, C}, {dwte, V * C}, {dwpe, T * C}}) {
      const auto h = down(p, len);
      all.insert(all.end(), h.begin(), h.end());
    }
    if (rep == 0) {
      first = all;
    } else {
      EXPECT_EQ(all, first);
    }
  }
}

TEST_F(CudaKernels, GpuClockMapsMarksIntoHostTime) {
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  const int n = 512;
  const auto a = randn(static_cast<std::size_t>(n) * n, 121);
  float *da = up(a), *dc = up(std::vector<float>(a.size()));
  gpu.synchronize();
  const std::int64_t t0 = now();
  conductor::runtime::cuda::GpuClock clock(gpu.stream());
  cudaEvent_t before = clock.mark();
  for (int i = 0; i < 20; i++) {
    matmul_forward(dc, da, da, nullptr, 1, n, n, n, WeightLayout::in_out, Accumulate::no, gpu);
  }
  cudaEvent_t after = clock.mark();
  gpu.synchronize();
  const std::int64_t t1 = now();
  ASSERT_TRUE(clock.query(before));
  ASSERT_TRUE(clock.query(after));
  const std::int64_t s0 = clock.steady_ns(before), s1 = clock.steady_ns(after);
  EXPECT_LT(s0, s1);            // 20 products of 512^3 take well over the ~1 us event resolution
  EXPECT_GE(s0, t0 - 100'000);  // inside the host interval that contains both marks, give or take the
  EXPECT_LE(s1, t1 + 100'000);  // anchor's error (a poll interval, microseconds)
}

// bf16 GEMM: both operands are rounded to bf16 (8-bit significand, unit roundoff u = 2^-9 = 1.95e-3) and the
// products summed in fp32. For random operands the rounding errors of the k terms are independent, so the
// norm-wise relative error of C is about sqrt(2) u = 2.8e-3 whatever k; bound 1e-2 (3.5x margin). A wrong
// operand order or transpose gives errors of order 1.
TEST_F(CudaKernelsBf16, MatmulWithinBf16Rounding) {
  const int B = 2, T = 32, C = 256, OC = 96;  // C is the summed dimension (k) of the forward product
  const auto inp = randn(static_cast<std::size_t>(B) * T * C, 101),
             weight = randn(static_cast<std::size_t>(OC) * C, 102);
  const auto out0 = randn(static_cast<std::size_t>(B) * T * OC, 103);
  for (const WeightLayout layout : kLayouts) {
    std::vector<float> out = out0;
    matmul_forward(out.data(), inp.data(), weight.data(), nullptr, B, T, C, OC, layout, Accumulate::yes, cpu);
    float* dout = up(out0);
    matmul_forward(dout, up(inp), up(weight), nullptr, B, T, C, OC, layout, Accumulate::yes, gpu);
    const double err = rel_err(down(dout, out.size()), out);
    EXPECT_LE(err, 1e-2) << "in_out=" << (layout == WeightLayout::in_out);
    EXPECT_GT(err, 0.0) << "bf16 mode produced exact fp32 results: the bf16 path is not in use";
  }
}

// bf16 mode runs the attention on tensor cores (attention_mma.cu) for head sizes 16 .. 128: q, k, v, dout, the
// probabilities and their gradients are rounded to bf16, every product accumulates in fp32. A float64 emulation of
// exactly those roundings (numpy, qkv and dout ~ N(0, s^2), s in {0.5, 1}, these shapes) gives norm-wise relative
// errors against exact attention of at most 3.0e-3 (out), 3.1e-4 (lse) and 4.2e-3 (dqkv); bounds 1e-2, 2e-3 and
// 1.5e-2 (>= 3x margin). A wrong tile index, mask or transpose gives errors of order 1. The kernel has no atomics:
// two runs are bit-identical.
TEST_F(CudaKernelsBf16, AttentionOnTensorCoresWithinBf16Rounding) {
  struct Case {
    int B, T, NH, HS;
  };
  for (const Case cs :
       {Case{2, 33, 3, 16}, Case{1, 130, 2, 64}, Case{1, 45, 1, 128}, Case{2, 200, 2, 32}, Case{1, 1, 2, 64}}) {
    const int B = cs.B, T = cs.T, NH = cs.NH, HS = cs.HS, C = NH * HS;
    const std::size_t nqkv = static_cast<std::size_t>(B) * T * NH * 3 * HS, ny = nqkv / 3;
    const std::size_t nlse = static_cast<std::size_t>(B) * NH * T;
    const auto qkv = randn(nqkv, 111, 0.5f), g = randn(ny, 112, 0.5f);
    std::vector<float> out(ny), lse(nlse), dqkv(nqkv), delta(nlse);
    attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, cpu);
    attention_backward(dqkv.data(), delta.data(), g.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, cpu);

    std::vector<float> first_out, first_dqkv;
    for (int run = 0; run < 2; run++) {
      float *d_qkv = up(qkv), *d_out = up(randn(ny, 113)), *d_lse = up(randn(nlse, 114));  // garbage outputs
      attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, gpu);
      float* d_dqkv = up(randn(nqkv, 115));
      attention_backward(d_dqkv, up(randn(nlse, 116)), up(g), d_qkv, d_out, d_lse, B, T, C, NH, gpu);
      const auto o = down(d_out, ny), dq = down(d_dqkv, nqkv);
      if (run == 1) {
        EXPECT_EQ(o, first_out) << "bf16 attention forward not deterministic, T=" << T << " HS=" << HS;
        EXPECT_EQ(dq, first_dqkv) << "bf16 attention backward not deterministic, T=" << T << " HS=" << HS;
        break;
      }
      const double err = rel_err(o, out);
      EXPECT_LE(err, 1e-2) << "T=" << T << " HS=" << HS;
      if (T > 1) {
        EXPECT_GT(err, 0.0) << "bf16 mode produced exact fp32 results: the tensor-core path is not in use";
      }
      EXPECT_LE(rel_err(down(d_lse, nlse), lse), 2e-3) << "T=" << T << " HS=" << HS;
      EXPECT_LE(rel_err(dq, dqkv), 1.5e-2) << "T=" << T << " HS=" << HS;
      first_out = o;
      first_dqkv = dq;
    }
  }
}

// Head sizes the tensor-core kernel does not serve keep the fp32 kernel in bf16 mode: fp32 rounding.
TEST_F(CudaKernelsBf16, AttentionOfOtherHeadSizesStaysFp32) {
  const int B = 2, T = 33, NH = 3, HS = 8, C = NH * HS;
  const std::size_t nqkv = static_cast<std::size_t>(B) * T * NH * 3 * HS, ny = nqkv / 3;
  const std::size_t nlse = static_cast<std::size_t>(B) * NH * T;
  const auto qkv = randn(nqkv, 111, 0.5f);
  std::vector<float> out(ny), lse(nlse);
  attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, cpu);
  float *dout = up(std::vector<float>(ny)), *dlse = up(std::vector<float>(nlse));
  attention_forward(dout, dlse, up(qkv), B, T, C, NH, gpu);
  EXPECT_LE(rel_err(down(dout, ny), out), kFp32Tol);
  EXPECT_LE(rel_err(down(dlse, nlse), lse), kFp32Tol);
}

}  // namespace
