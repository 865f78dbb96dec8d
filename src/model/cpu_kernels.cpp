// CPU implementations of the model kernels (declared once in matmul.hpp ... adamw.hpp): fp32, OpenMP over independent
// rows or channel blocks, GEMMs through OpenBLAS. Every reduction runs in a fixed order (no atomics, no OpenMP
// reduction clauses across threads), so results are bit-identical run to run for a given thread count; checkpoint
// restarts rely on this. We never read floating-point exception flags; without this GCC refuses to if-convert (and so
// to vectorise) loops holding a float comparison or a float -> int conversion.
#pragma GCC optimize("no-trapping-math")

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernel_table.hpp"

// The pointwise and row kernels are compiled for AVX-512, AVX2 and baseline x86-64 and picked at load time
// (the library itself is built for baseline x86-64). GEMMs dispatch inside OpenBLAS.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define CONDUCTOR_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CONDUCTOR_SIMD_CLONES
#endif

namespace conductor::model::cpu {

namespace {
constexpr int kColumnBlock = 64;  // channels per OpenMP task in column reductions
constexpr float kLnEps = 1e-5f;

// exp(x) for float, vectorisable (libm's expf/tanhf are scalar calls and dominated the step time): range
// reduction x = n ln2 + r, |r| <= ln2/2, Cephes degree-6 polynomial, 2^n by exponent bits. Relative error
// below 1e-7 over the clamped range (measured against double exp); exp(-87) ~ 1.6e-38 stands in for 0.
inline float fast_exp(float x) {
  x = x < 88.0f ? x : 88.0f;
  x = x > -87.0f ? x : -87.0f;
  // n = round(x / ln2) by the 1.5 * 2^23 trick; the integer n is then in the low mantissa bits of t.
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  const std::int32_t ni = std::bit_cast<std::int32_t>(t) - 0x4B400000;
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  return p * std::bit_cast<float>((ni + 127) << 23);
}
// tanh through exp: 1 - 2 / (exp(2u) + 1); absolute error ~1e-7, exact limits +-1.
inline float fast_tanh(float u) { return 1.0f - 2.0f / (fast_exp(2.0f * u) + 1.0f); }

inline float dot(const float* a, const float* b, int n) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}
inline void axpy(float* y, float a, const float* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++) y[i] += a * x[i];
}
}  // namespace

// ---------------------------------------------------------------- dense
namespace {
// c [m,n] = op(a) @ op(b) (+ c when acc), op(a) [m,k] (a stored [k,m] when trans_a), op(b) [k,n] (b stored [n,k]
// when trans_b). The one place the CPU calls BLAS.
void gemm(float* c, const float* a, const float* b, int m, int n, int k, CBLAS_TRANSPOSE trans_a,
          CBLAS_TRANSPOSE trans_b, Accumulate acc) {
  const float beta = acc == Accumulate::yes ? 1.0f : 0.0f;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // c = beta * c
    for (long i = 0; i < static_cast<long>(m) * n; i++) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a, trans_b, m, n, k, 1.0f, a, trans_a == CblasTrans ? m : k, b,
              trans_b == CblasTrans ? k : n, beta, c, n);
}
}  // namespace

// out [N,OC] += bias [OC]. (Not in the anonymous namespace: target_clones wants external linkage.)
CONDUCTOR_SIMD_CLONES void bias_forward(float* out, const float* bias, int N, int OC) {
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    float* o = out + static_cast<long>(i) * OC;
#pragma omp simd
    for (int j = 0; j < OC; j++) o[j] += bias[j];
  }
}

// dbias [OC] += column sums of dout [N,OC]
CONDUCTOR_SIMD_CLONES void bias_backward(float* dbias, const float* dout, int N, int OC) {
  const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, c1 = std::min(OC, c0 + kColumnBlock);
    float acc[kColumnBlock] = {};
    for (int i = 0; i < N; i++) {
      const float* d = dout + static_cast<long>(i) * OC;
      for (int c = c0; c < c1; c++) acc[c - c0] += d[c];
    }
    for (int c = c0; c < c1; c++) dbias[c] += acc[c - c0];
  }
}

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC,
                    WeightLayout layout, Accumulate acc, Backend&) {
  const int N = B * T;
  gemm(out, inp, weight, N, OC, C, CblasNoTrans, layout == WeightLayout::out_in ? CblasTrans : CblasNoTrans, acc);
  if (bias) bias_forward(out, bias, N, OC);
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                           WeightLayout layout, Accumulate acc, Backend&) {
  gemm(dinp, dout, weight, B * T, C, OC, CblasNoTrans, layout == WeightLayout::out_in ? CblasNoTrans : CblasTrans, acc);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int B, int T, int C,
                            int OC, WeightLayout layout, Backend&) {
  const int N = B * T;
  if (layout == WeightLayout::out_in) {
    gemm(dweight, dout, inp, OC, C, N, CblasTrans, CblasNoTrans, Accumulate::yes);  // (OC,C) += dout^T @ inp
  } else {
    gemm(dweight, inp, dout, C, OC, N, CblasTrans, CblasNoTrans, Accumulate::yes);  // (C,OC) += inp^T @ dout
  }
  if (dbias) bias_backward(dbias, dout, N, OC);
}

// ---------------------------------------------------------------- embedding
CONDUCTOR_SIMD_CLONES void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B,
                                           int T, int C, Backend&) {
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      float* o = out + (static_cast<long>(b) * T + t) * C;
      const float* e = wte + static_cast<long>(tokens[b * T + t]) * C;
      const float* p = wpe + static_cast<long>(t) * C;
#pragma omp simd
      for (int i = 0; i < C; i++) o[i] = e[i] + p[i];
    }
  }
}

CONDUCTOR_SIMD_CLONES void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B,
                                            int T, int C, Backend&) {
  // Tokens repeat, so rows of dwte collide; each thread owns a block of channels instead.
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const float* d = dout + (static_cast<long>(b) * T + t) * C;
        float* we = dwte + static_cast<long>(tokens[b * T + t]) * C;
        float* wp = dwpe + static_cast<long>(t) * C;
        for (int c = c0; c < c1; c++) {
          we[c] += d[c];
          wp[c] += d[c];
        }
      }
    }
  }
}

// ---------------------------------------------------------------- layernorm
CONDUCTOR_SIMD_CLONES void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                                             const float* weight, const float* bias, int B, int T, int C, Backend&) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float* x = inp + static_cast<long>(i) * C;
    float m = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++) m += x[c];
    m /= C;
    float v = 0.0f;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const float s = 1.0f / std::sqrt(v + kLnEps);
    float* o = out + static_cast<long>(i) * C;
#pragma omp simd
    for (int c = 0; c < C; c++) o[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

CONDUCTOR_SIMD_CLONES void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                                                    const float* weight, const float* mean, const float* rstd, int B,
                                                    int T, int C, Backend&) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float* x = inp + static_cast<long>(i) * C;
    const float* d = dout + static_cast<long>(i) * C;
    float* dx = dinp + static_cast<long>(i) * C;
    const float m = mean[i], s = rstd[i];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
    for (int c = 0; c < C; c++) {
      const float dn = weight[c] * d[c];
      dnorm_mean += dn;
      dnorm_norm_mean += dn * (x[c] - m) * s;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; c++) {
      const float norm = (x[c] - m) * s;
      dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

CONDUCTOR_SIMD_CLONES void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                                                     const float* mean, const float* rstd, int B, int T, int C,
                                                     Backend&) {
  const int N = B * T;
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock, c1 = std::min(C, c0 + kColumnBlock);
    float dw[kColumnBlock] = {}, db[kColumnBlock] = {};
    for (int i = 0; i < N; i++) {
      const float* x = inp + static_cast<long>(i) * C;
      const float* d = dout + static_cast<long>(i) * C;
      const float m = mean[i], s = rstd[i];
      for (int c = c0; c < c1; c++) {
        dw[c - c0] += d[c] * (x[c] - m) * s;
        db[c - c0] += d[c];
      }
    }
    for (int c = c0; c < c1; c++) {
      dweight[c] += dw[c - c0];
      dbias[c] += db[c - c0];
    }
  }
}

// ---------------------------------------------------------------- attention
// Fused causal attention (FlashAttention's algorithm on the CPU): no [T,T] matrix. The forward walks each query's
// keys in blocks of kKeyBlock with an online softmax (running maximum and sum; the accumulated output is rescaled
// when the maximum grows) and keeps the row's log-sum-exp; the backward recomputes each probability from it.
namespace {
constexpr int kKeyBlock = 64;

inline const float* head_row(const float* qkv, int b, int t, int h, int T, long C3, int HS) {
  return qkv + (static_cast<long>(b) * T + t) * C3 + 3L * h * HS;
}
}  // namespace

CONDUCTOR_SIMD_CLONES void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH,
                                             Backend&) {
  if (NH <= 0) return;  // an empty head range
  const int HS = C / NH;
  const long C3 = 3L * NH * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
#pragma omp parallel
  {
    std::vector<float> score(kKeyBlock);
#pragma omp for collapse(3) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        for (int t = 0; t < T; t++) {
          const float* q = head_row(qkv, b, t, h, T, C3, HS);
          float* o = out + (static_cast<long>(b) * T + t) * NH * HS + static_cast<long>(h) * HS;
          std::memset(o, 0, sizeof(float) * HS);
          float maxv = -FLT_MAX, sum = 0.0f;
          for (int j0 = 0; j0 <= t; j0 += kKeyBlock) {
            const int n = std::min(kKeyBlock, t + 1 - j0);
            float block_max = -FLT_MAX;
            for (int j = 0; j < n; j++) {
              score[j] = dot(q, head_row(qkv, b, j0 + j, h, T, C3, HS) + HS, HS) * scale;
              block_max = std::max(block_max, score[j]);
            }
            if (block_max > maxv) {  // rescale what the earlier blocks accumulated to the new maximum
              const float c = fast_exp(maxv - block_max);
              sum *= c;
              for (int i = 0; i < HS; i++) o[i] *= c;
              maxv = block_max;
            }
            for (int j = 0; j < n; j++) {
              const float p = fast_exp(score[j] - maxv);
              sum += p;
              axpy(o, p, head_row(qkv, b, j0 + j, h, T, C3, HS) + 2 * HS, HS);
            }
          }
          const float inv = 1.0f / sum;
          for (int i = 0; i < HS; i++) o[i] *= inv;
          lse[(static_cast<long>(b) * NH + h) * T + t] = maxv + std::log(sum);
        }
      }
    }
  }
}

CONDUCTOR_SIMD_CLONES void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv,
                                              const float* out, const float* lse, int B, int T, int C, int NH,
                                              Backend&) {
  if (NH <= 0) return;  // an empty head range
  const int HS = C / NH;
  const long C3 = 3L * NH * HS;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  // Keys and values of a head receive gradient from every later query, so a (b, h) pair is one task.
#pragma omp parallel for collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        std::memset(dqkv + (static_cast<long>(b) * T + t) * C3 + 3L * h * HS, 0, sizeof(float) * 3 * HS);
      }
      for (int t = 0; t < T; t++) {
        const long row = (static_cast<long>(b) * T + t) * C3 + 3L * h * HS;
        const float* q = qkv + row;
        float* dq = dqkv + row;
        const long orow = (static_cast<long>(b) * T + t) * NH * HS + static_cast<long>(h) * HS;
        const float* d = dout + orow;
        const long r = (static_cast<long>(b) * NH + h) * T + t;
        // sum_j p_j dp_j = dout . out: the softmax backward's row term without the probabilities.
        const float D = dot(d, out + orow, HS);
        delta[r] = D;
        const float m = lse[r];
        for (int t2 = 0; t2 <= t; t2++) {
          const long row2 = (static_cast<long>(b) * T + t2) * C3 + 3L * h * HS;
          const float p = fast_exp(dot(q, qkv + row2 + HS, HS) * scale - m);
          const float dp = dot(qkv + row2 + 2 * HS, d, HS);
          axpy(dqkv + row2 + 2 * HS, p, d, HS);  // dv
          const float ds = p * (dp - D) * scale;
          axpy(dq, ds, qkv + row2 + HS, HS);  // dq
          axpy(dqkv + row2 + HS, ds, q, HS);  // dk
        }
      }
    }
  }
}

// ---------------------------------------------------------------- pointwise
namespace {
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
}

CONDUCTOR_SIMD_CLONES void gelu_forward(float* out, const float* inp, std::size_t N, Backend&) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < static_cast<long>(N); i++) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + fast_tanh(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

CONDUCTOR_SIMD_CLONES void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N, Backend&) {
#pragma omp parallel for simd schedule(static)
  for (long i = 0; i < static_cast<long>(N); i++) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = fast_tanh(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

CONDUCTOR_SIMD_CLONES void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t N, Backend&) {
#pragma omp parallel for schedule(static)
  for (long i = 0; i < static_cast<long>(N); i++) out[i] = inp1[i] + inp2[i];
}

// ---------------------------------------------------------------- loss
CONDUCTOR_SIMD_CLONES void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets,
                                                int B, int T, int V, Backend&) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float* l = logits + static_cast<long>(i) * V;
    float* p = probs + static_cast<long>(i) * V;
    float maxv = -FLT_MAX;
    for (int v = 0; v < V; v++) maxv = std::max(maxv, l[v]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int v = 0; v < V; v++) {
      p[v] = fast_exp(l[v] - maxv);
      sum += p[v];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int v = 0; v < V; v++) p[v] *= inv;
    losses[i] = -(l[targets[i]] - maxv - std::log(sum));
  }
}

CONDUCTOR_SIMD_CLONES void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss,
                                                 int B, int T, int V, Backend&) {
  const int N = B * T;
#pragma omp parallel for schedule(static)
  for (int i = 0; i < N; i++) {
    const float* p = probs + static_cast<long>(i) * V;
    float* d = dlogits + static_cast<long>(i) * V;
#pragma omp simd
    for (int v = 0; v < V; v++) d[v] = dloss * p[v];
    d[targets[i]] -= dloss;
  }
}

// Vocabulary-parallel loss (crossentropy.hpp). Scalar loops in column and group order, no SIMD clones: a clone
// with FMA could contract S's multiply-add, and the bits must not depend on which machine ran a group.
void vocab_stats_forward(float* mx, float* sum, float* target_logit, const float* logits, const int* targets, int v0,
                         int B, int T, int nv, Backend&) {
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < rows; ++i) {
    const float* l = logits + i * nv;
    float m = -FLT_MAX;
    for (int v = 0; v < nv; ++v) m = std::max(m, l[v]);
    float s = 0.0f;
    for (int v = 0; v < nv; ++v) s += std::exp(l[v] - m);
    mx[i] = m;
    sum[i] = s;
    const int t = targets[i] - v0;
    target_logit[i] = t >= 0 && t < nv ? l[t] : 0.0f;
  }
}

void vocab_loss_forward(float* losses, float* M, float* S, const float* stats, const int* targets, int G, int V, int B,
                        int T, Backend&) {
  const long bt = static_cast<long>(B) * T;
  for (long i = 0; i < bt; ++i) {
    float m = -FLT_MAX, s = 0.0f;
    for (int k = 0; k < G; ++k) m = std::max(m, stats[3 * bt * k + i]);
    for (int k = 0; k < G; ++k) s += stats[3 * bt * k + bt + i] * std::exp(stats[3 * bt * k + i] - m);
    int holder = 0;  // the group holding the target: ids [k V/G, (k+1) V/G)
    while (holder + 1 < G && static_cast<long>(holder + 1) * V / G <= targets[i]) ++holder;
    M[i] = m;
    S[i] = s;
    losses[i] = -(stats[3 * bt * holder + 2 * bt + i] - m - std::log(s));
  }
}

void vocab_dlogits_backward(float* dlogits, const float* logits, const int* targets, const float* M, const float* S,
                            float dloss, int v0, int B, int T, int nv, Backend&) {
  const long rows = static_cast<long>(B) * T;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < rows; ++i) {
    const float* l = logits + i * nv;
    float* d = dlogits + i * nv;
    const float inv = 1.0f / S[i];
    for (int v = 0; v < nv; ++v) d[v] = dloss * (std::exp(l[v] - M[i]) * inv);
    const int t = targets[i] - v0;
    if (t >= 0 && t < nv) d[t] -= dloss;
  }
}

// ---------------------------------------------------------------- optimizer
CONDUCTOR_SIMD_CLONES void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N,
                                        const AdamWStep& step, Backend&) {
  const float lr = step.lr, beta1 = step.beta1, beta2 = step.beta2, eps = step.eps, grad_scale = step.grad_scale;
  const int t = step.t;
  const float weight_decay = step.weight_decay;
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(beta2, static_cast<float>(t)));
  const float step_size = lr / bc1;
  const float decay = 1.0f - lr * weight_decay;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < static_cast<long>(N); i++) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (std::sqrt(vi) / bc2_sqrt + eps);
  }
}

double sum_squares(const float* x, std::size_t N, Backend&) {
  constexpr std::size_t kChunk = 1 << 14;  // fixed chunks: the sum's order does not depend on the thread count
  const long chunks = static_cast<long>((N + kChunk - 1) / kChunk);
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (long c = 0; c < chunks; c++) {
    const std::size_t i0 = c * kChunk, i1 = std::min(N, i0 + kChunk);
    double s = 0.0;
    for (std::size_t i = i0; i < i1; i++) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count, Backend& be) {
  for (int i = 0; i < count; ++i) out[i] = cpu::sum_squares(xs[i], ns[i], be);
}

}  // namespace conductor::model::cpu

namespace conductor::model {

const KernelTable& cpu_kernel_table() {
  static const KernelTable table = [] {
    KernelTable k;
    k.matmul_forward = cpu::matmul_forward;
    k.matmul_backward_input = cpu::matmul_backward_input;
    k.matmul_backward_weight = cpu::matmul_backward_weight;
    k.encoder_forward = cpu::encoder_forward;
    k.encoder_backward = cpu::encoder_backward;
    k.layernorm_forward = cpu::layernorm_forward;
    k.layernorm_backward_input = cpu::layernorm_backward_input;
    k.layernorm_backward_weight = cpu::layernorm_backward_weight;
    k.attention_forward = cpu::attention_forward;
    k.attention_backward = cpu::attention_backward;
    k.gelu_forward = cpu::gelu_forward;
    k.gelu_backward = cpu::gelu_backward;
    k.residual_forward = cpu::residual_forward;
    k.crossentropy_forward = cpu::crossentropy_forward;
    k.crossentropy_backward = cpu::crossentropy_backward;
    k.vocab_stats_forward = cpu::vocab_stats_forward;
    k.vocab_loss_forward = cpu::vocab_loss_forward;
    k.vocab_dlogits_backward = cpu::vocab_dlogits_backward;
    k.adamw_update = cpu::adamw_update;
    k.sum_squares = cpu::sum_squares;
    k.sum_squares_each = cpu::sum_squares_each;
    return k;
  }();
  return table;
}

}  // namespace conductor::model
