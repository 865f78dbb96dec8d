// Every kernel of CudaBackend against the CPU backend (the reference) on random inputs.
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
#include "conductor/model/backend.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/runtime/cuda/gpu_clock.hpp"

namespace {

using conductor::model::Backend;
using conductor::model::DeviceBuffer;
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
  Backend& cpu = conductor::model::cpu_backend();
  std::deque<DeviceBuffer> bufs;
};

class CudaKernelsBf16 : public CudaKernels {
 protected:
  CudaKernelsBf16() : CudaKernels(cu::CudaOptions{-1, cu::Precision::bf16, false}) {}
};

TEST_F(CudaKernels, GemmAllTransposes) {
  const int m = 37, n = 53, k = 29;
  for (int ta = 0; ta < 2; ta++) {
    for (int tb = 0; tb < 2; tb++) {
      const auto a = randn(static_cast<std::size_t>(m) * k, 1 + ta), b = randn(static_cast<std::size_t>(k) * n, 3 + tb);
      const auto c0 = randn(static_cast<std::size_t>(m) * n, 5);
      std::vector<float> c = c0;
      cpu.gemm(c.data(), a.data(), b.data(), m, n, k, ta, tb, 0.7f, 0.3f);
      float* dc = up(c0);
      gpu.gemm(dc, up(a), up(b), m, n, k, ta, tb, 0.7f, 0.3f);
      EXPECT_LE(rel_err(down(dc, c.size()), c), kFp32Tol) << "trans_a=" << ta << " trans_b=" << tb;
    }
  }
}

TEST_F(CudaKernels, GemmWithEmptyInnerDimensionScalesC) {
  const int m = 5, n = 7;
  const auto c0 = randn(static_cast<std::size_t>(m) * n, 9);
  std::vector<float> c = c0;
  cpu.gemm(c.data(), nullptr, nullptr, m, n, 0, false, false, 1.0f, 0.5f);
  float* dc = up(c0);
  gpu.gemm(dc, nullptr, nullptr, m, n, 0, false, false, 1.0f, 0.5f);
  EXPECT_LE(rel_err(down(dc, c.size()), c), kFp32Tol);
}

TEST_F(CudaKernels, BiasForwardAndBackward) {
  const int N = 600, OC = 70;  // 600 rows: three row chunks in the column reduction
  const auto out0 = randn(static_cast<std::size_t>(N) * OC, 11), bias = randn(OC, 12);
  std::vector<float> out = out0;
  cpu.bias_forward(out.data(), bias.data(), N, OC);
  float* dout = up(out0);
  gpu.bias_forward(dout, up(bias), N, OC);
  EXPECT_LE(rel_err(down(dout, out.size()), out), kFp32Tol);

  const auto g = randn(static_cast<std::size_t>(N) * OC, 13), db0 = randn(OC, 14);
  std::vector<float> db = db0;
  cpu.bias_backward(db.data(), g.data(), N, OC);
  float* ddb = up(db0);
  gpu.bias_backward(ddb, up(g), N, OC);
  EXPECT_LE(rel_err(down(ddb, OC), db), kFp32Tol);
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
    cpu.encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    int* dtok = up(tokens);
    float* dout = up(randn(out.size(), 24));  // garbage: the kernel overwrites
    gpu.encoder_forward(dout, dtok, up(wte), up(wpe), B, T, C);
    EXPECT_LE(rel_err(down(dout, out.size()), out), kFp32Tol) << "B=" << B << " T=" << T;

    const auto g = randn(out.size(), 25), dwte0 = randn(wte.size(), 26), dwpe0 = randn(wpe.size(), 27);
    std::vector<float> dwte = dwte0, dwpe = dwpe0;
    cpu.encoder_backward(dwte.data(), dwpe.data(), g.data(), tokens.data(), B, T, C);
    float *ddwte = up(dwte0), *ddwpe = up(dwpe0);
    gpu.encoder_backward(ddwte, ddwpe, up(g), dtok, B, T, C);
    EXPECT_LE(rel_err(down(ddwte, dwte.size()), dwte), kFp32Tol) << "B=" << B << " T=" << T;
    EXPECT_LE(rel_err(down(ddwpe, dwpe.size()), dwpe), kFp32Tol) << "B=" << B << " T=" << T;
  }
}

TEST_F(CudaKernels, LayerNormForwardAndBackward) {
  const int B = 2, T = 150, C = 70, N = B * T;
  const std::size_t n = static_cast<std::size_t>(N) * C;
  const auto inp = randn(n, 31, 2.0f), w = randn(C, 32), b = randn(C, 33);
  std::vector<float> out(n), mean(N), rstd(N);
  cpu.layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), B, T, C);
  float *dout = up(std::vector<float>(n)), *dmean = up(std::vector<float>(N)), *drstd = up(std::vector<float>(N));
  float *dinp = up(inp), *dw = up(w);
  gpu.layernorm_forward(dout, dmean, drstd, dinp, dw, up(b), B, T, C);
  EXPECT_LE(rel_err(down(dout, n), out), kFp32Tol);
  EXPECT_LE(rel_err(down(dmean, N), mean), kFp32Tol);
  EXPECT_LE(rel_err(down(drstd, N), rstd), kFp32Tol);

  // Backward from the CPU's mean / rstd on both sides, so each kernel is compared on identical inputs.
  const auto g = randn(n, 34), dx0 = randn(n, 35);
  float *dg = up(g), *dm = up(mean), *dr = up(rstd);
  std::vector<float> dx = dx0;
  cpu.layernorm_backward_input(dx.data(), g.data(), inp.data(), w.data(), mean.data(), rstd.data(), B, T, C);
  float* ddx = up(dx0);
  gpu.layernorm_backward_input(ddx, dg, dinp, dw, dm, dr, B, T, C);
  EXPECT_LE(rel_err(down(ddx, n), dx), kFp32Tol);

  const auto dw0 = randn(C, 36), db0 = randn(C, 37);
  std::vector<float> gw = dw0, gb = db0;
  cpu.layernorm_backward_weight(gw.data(), gb.data(), g.data(), inp.data(), mean.data(), rstd.data(), B, T, C);
  float *dgw = up(dw0), *dgb = up(db0);
  gpu.layernorm_backward_weight(dgw, dgb, dg, dinp, dm, dr, B, T, C);
  EXPECT_LE(rel_err(down(dgw, C), gw), kFp32Tol);
  EXPECT_LE(rel_err(down(dgb, C), gb), kFp32Tol);
}

TEST_F(CudaKernels, AttentionForwardAndBackward) {
  struct Case {
    int B, T, NH, HS;
  };
  for (const Case cs : {Case{2, 33, 3, 16}, Case{1, 64, 2, 8}, Case{2, 1, 2, 4}}) {
    const int B = cs.B, T = cs.T, NH = cs.NH, HS = cs.HS;
    const std::size_t nqkv = static_cast<std::size_t>(B) * T * NH * 3 * HS, ny = nqkv / 3;
    const std::size_t natt = static_cast<std::size_t>(B) * NH * T * T;
    const auto qkv = randn(nqkv, 41);
    std::vector<float> out(ny), att(natt);
    cpu.attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS);
    float *dqkv_in = up(qkv), *dout = up(randn(ny, 42)), *datt = up(randn(natt, 43));  // garbage outputs
    gpu.attention_forward(dout, datt, dqkv_in, B, T, NH, HS);
    EXPECT_LE(rel_err(down(dout, ny), out), kFp32Tol) << "T=" << T;
    const auto gatt = down(datt, natt);
    EXPECT_LE(rel_err(gatt, att), kFp32Tol) << "T=" << T;
    for (int r = 0; r < B * NH; r++) {  // the masked half must be exact zeros
      for (int t = 0; t < T; t++) {
        for (int t2 = t + 1; t2 < T; t2++) ASSERT_EQ(gatt[(static_cast<std::size_t>(r) * T + t) * T + t2], 0.0f);
      }
    }

    const auto g = randn(ny, 44);
    std::vector<float> dqkv(nqkv), scratch(natt);
    cpu.attention_backward(dqkv.data(), scratch.data(), g.data(), qkv.data(), att.data(), B, T, NH, HS);
    float* ddqkv = up(randn(nqkv, 45));  // garbage: overwritten
    gpu.attention_backward(ddqkv, up(randn(natt, 46)), up(g), dqkv_in, up(att), B, T, NH, HS);
    EXPECT_LE(rel_err(down(ddqkv, nqkv), dqkv), kFp32Tol) << "T=" << T;
  }
}

TEST_F(CudaKernels, GeluAndResidual) {
  const std::size_t n = 10007;
  const auto x = randn(n, 51, 2.0f), y = randn(n, 52);
  std::vector<float> out(n);
  cpu.gelu_forward(out.data(), x.data(), n);
  float *dx = up(x), *dout = up(std::vector<float>(n));
  gpu.gelu_forward(dout, dx, n);
  EXPECT_LE(rel_err(down(dout, n), out), kFp32Tol);

  std::vector<float> d = y;  // dinp aliases dout, as the MLP slice calls it
  cpu.gelu_backward(d.data(), d.data(), x.data(), n);
  float* dd = up(y);
  gpu.gelu_backward(dd, dd, dx, n);
  EXPECT_LE(rel_err(down(dd, n), d), kFp32Tol);

  std::vector<float> r = x;  // out aliases a
  cpu.residual_forward(r.data(), r.data(), y.data(), n);
  float* dr = up(x);
  gpu.residual_forward(dr, dr, up(y), n);
  EXPECT_LE(rel_err(down(dr, n), r), kFp32Tol);
}

TEST_F(CudaKernels, CrossEntropyForwardAndBackward) {
  const int B = 2, T = 5, V = 1000, N = B * T;
  const std::size_t n = static_cast<std::size_t>(N) * V;
  const auto logits = randn(n, 61, 3.0f);
  const auto targets = randint(N, V, 62);
  std::vector<float> losses(N), probs(n);
  cpu.crossentropy_forward(losses.data(), probs.data(), logits.data(), targets.data(), B, T, V);
  float *dl = up(std::vector<float>(N)), *dp = up(std::vector<float>(n));
  int* dt = up(targets);
  gpu.crossentropy_forward(dl, dp, up(logits), dt, B, T, V);
  EXPECT_LE(rel_err(down(dl, N), losses), kFp32Tol);
  EXPECT_LE(rel_err(down(dp, n), probs), kFp32Tol);

  const float scale = 0.5f / N;
  cpu.crossentropy_backward(probs.data(), probs.data(), targets.data(), scale, B, T, V);  // in place, as the stage
  gpu.crossentropy_backward(dp, dp, dt, scale, B, T, V);
  EXPECT_LE(rel_err(down(dp, n), probs), kFp32Tol);
}

TEST_F(CudaKernels, AdamW) {
  const std::size_t n = 10000;
  const auto p0 = randn(n, 71), m0 = randn(n, 72, 0.01f), g = randn(n, 73, 0.1f);
  auto v0 = randn(n, 74, 0.01f);
  for (auto& x : v0) x = x * x;
  std::vector<float> p = p0, m = m0, v = v0;
  cpu.adamw_update(p.data(), m.data(), v.data(), g.data(), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, 3);
  float *dp = up(p0), *dm = up(m0), *dv = up(v0);
  gpu.adamw_update(dp, dm, dv, up(g), n, 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.8f, 3);
  EXPECT_LE(rel_err(down(dp, n), p), kFp32Tol);
  EXPECT_LE(rel_err(down(dm, n), m), kFp32Tol);
  EXPECT_LE(rel_err(down(dv, n), v), kFp32Tol);
}

TEST_F(CudaKernels, SumSquaresMatchesAndIsDeterministic) {
  for (const std::size_t n : {std::size_t{5}, std::size_t{3000007}}) {
    const auto x = randn(n, 81);
    const double ref = cpu.sum_squares(x.data(), n);
    float* dx = up(x);
    const double a = gpu.sum_squares(dx, n), b = gpu.sum_squares(dx, n);
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
  gpu.sum_squares_each(each.data(), xs.data(), sizes.data(), static_cast<int>(sizes.size()));
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double one = sizes[i] ? gpu.sum_squares(xs[i], sizes[i]) : 0.0;
    EXPECT_EQ(each[i], one) << "tensor " << i;
    if (sizes[i]) {
      EXPECT_LE(std::abs(each[i] - cpu.sum_squares(host[i].data(), sizes[i])) / one, 1e-12);
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
    gpu.bias_backward(db, dg, N, C);
    gpu.layernorm_backward_weight(dw, dlb, dg, di, dm, dr, B, T, C);
    gpu.encoder_backward(dwte, dwpe, dg, dt, B, T, C);
    std::vector<float> all;
    for (auto [p, len] : {std::pair{db, C}, {dw, C}, {dlb, C}, {dwte, V * C}, {dwpe, T * C}}) {
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
  for (int i = 0; i < 20; i++) gpu.gemm(dc, da, da, n, n, n, false, false, 1.0f, 0.0f);
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
TEST_F(CudaKernelsBf16, GemmWithinBf16Rounding) {
  const int m = 64, n = 96, k = 256;
  for (int ta = 0; ta < 2; ta++) {
    for (int tb = 0; tb < 2; tb++) {
      const auto a = randn(static_cast<std::size_t>(m) * k, 101), b = randn(static_cast<std::size_t>(k) * n, 102);
      const auto c0 = randn(static_cast<std::size_t>(m) * n, 103);
      std::vector<float> c = c0;
      cpu.gemm(c.data(), a.data(), b.data(), m, n, k, ta, tb, 1.0f, 1.0f);
      float* dc = up(c0);
      gpu.gemm(dc, up(a), up(b), m, n, k, ta, tb, 1.0f, 1.0f);
      const double err = rel_err(down(dc, c.size()), c);
      EXPECT_LE(err, 1e-2) << "trans_a=" << ta << " trans_b=" << tb;
      EXPECT_GT(err, 0.0) << "bf16 mode produced exact fp32 results: the bf16 path is not in use";
    }
  }
}

// bf16 mode runs attention's products in TF32 (10-bit significand, u = 2^-11 = 4.9e-4). Scores q.k of
// unit-variance inputs with HS = 16 have a relative error ~ sqrt(2) u; the softmax turns a score error into
// a probability error of the same relative size, and out = att v adds another ~u: ~1.5e-3 norm-wise. Bound 5e-3.
TEST_F(CudaKernelsBf16, AttentionWithinTf32Rounding) {
  const int B = 2, T = 33, NH = 3, HS = 16;
  const std::size_t nqkv = static_cast<std::size_t>(B) * T * NH * 3 * HS, ny = nqkv / 3;
  const std::size_t natt = static_cast<std::size_t>(B) * NH * T * T;
  const auto qkv = randn(nqkv, 111, 0.5f);
  std::vector<float> out(ny), att(natt);
  cpu.attention_forward(out.data(), att.data(), qkv.data(), B, T, NH, HS);
  float *dout = up(std::vector<float>(ny)), *datt = up(std::vector<float>(natt));
  gpu.attention_forward(dout, datt, up(qkv), B, T, NH, HS);
  EXPECT_LE(rel_err(down(dout, ny), out), 5e-3);
  EXPECT_LE(rel_err(down(datt, natt), att), 5e-3);
}

}  // namespace
