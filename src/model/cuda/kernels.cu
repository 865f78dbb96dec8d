// Our CUDA kernels (llm.c style): fp32, one thread per element for pointwise work, one warp per row for row
// reductions (LayerNorm, softmax), one block per row when rows are long (cross-entropy over the vocabulary).
// Every reduction has a fixed order that depends only on the shapes, never on scheduling, and no kernel uses
// floating-point atomics: results are bit-identical run to run, as on the CPU (checkpoint restarts rely on it).
// The formulas mirror cpu_kernels.cpp operation by operation so the two agree to fp32 rounding. Below the device
// kernels: the CUDA implementations of the model kernels (one signature with the CPU's, from matmul.hpp ...
// adamw.hpp), all queued on the backend's stream, and the backend's kernel table.
#include <cuda_bf16.h>

#include <cfloat>
#include <cmath>
#include <string>

#include "conductor/model/cuda/check.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/util/error.hpp"
#include "kernels.cuh"

namespace conductor::model::cuda {

namespace {

constexpr int kThreads = 256;
constexpr float kLnEps = 1e-5f;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr int kColumnTile = 32;                    // columns per block in column reductions (one warp wide)
constexpr int kColumnRowsPerChunk = 256;           // rows per chunk of a column reduction

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65536 ? (blocks == 0 ? 1 : blocks) : 65536);  // grid-stride beyond
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// Block-wide reductions; every thread of the block must call them and gets the result.
__device__ float block_sum(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  v = warp_sum(v);
  __syncthreads();  // sh may still be read by a previous call
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : 0.0f;
  v = warp_sum(v);
  return v;
}
__device__ float block_max(float v) {
  __shared__ float sh[32];
  const int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) sh[wid] = v;
  __syncthreads();
  v = lane < nw ? sh[lane] : -FLT_MAX;
  v = warp_max(v);
  return v;
}

#define GRID_STRIDE(i, n)                                                                        \
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)

// ------------------------------------------------------------------------------------------------ dense
__global__ void scale_kernel(float* c, float beta, std::size_t n) {
  GRID_STRIDE(i, n) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
}

__global__ void bias_forward_kernel(float* out, const float* bias, std::size_t n, int OC) {
  GRID_STRIDE(i, n) out[i] += bias[i % OC];
}

// partial [chunks, OC]: block (32, 8) sums rows of chunk blockIdx.y for 32 columns; rows ty, ty+8, ... then the
// 8 row-phases in order.
__global__ void column_partial_kernel(float* partial, const float* dout, int N, int OC) {
  __shared__ float sh[8][kColumnTile];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int r0 = blockIdx.y * kColumnRowsPerChunk;
  const int r1 = min(N, r0 + kColumnRowsPerChunk);
  float acc = 0.0f;
  if (c < OC) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) acc += dout[static_cast<long>(r) * OC + c];
  }
  sh[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < OC) {
    float s = 0.0f;
    for (int y = 0; y < 8; y++) s += sh[y][threadIdx.x];
    partial[static_cast<long>(blockIdx.y) * OC + c] = s;
  }
}

// out[c] += sum over chunks of partial[chunk, c], chunks in order.
__global__ void column_finish_kernel(float* out, const float* partial, int chunks, int OC) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= OC) return;
  float s = 0.0f;
  for (int k = 0; k < chunks; k++) s += partial[static_cast<long>(k) * OC + c];
  out[c] += s;
}

// ------------------------------------------------------------------------------------------------ embedding
__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte, const float* wpe, int T, int C,
                                       std::size_t n) {
  GRID_STRIDE(i, n) {
    const std::size_t bt = i / C;
    const int c = static_cast<int>(i % C);
    const int t = static_cast<int>(bt % T);
    out[i] = wte[static_cast<std::size_t>(tokens[bt]) * C + c] + wpe[static_cast<std::size_t>(t) * C + c];
  }
}

// dwpe[t, c] += dout[b, t, c] for b in order (the CPU kernel's order).
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
  const std::size_t n = static_cast<std::size_t>(T) * C;
  GRID_STRIDE(i, n) {
    float v = dwpe[i];
    for (int b = 0; b < B; b++) v += dout[static_cast<std::size_t>(b) * n + i];
    dwpe[i] = v;
  }
}

// dwte: rows repeat when tokens repeat, so position bt handles its token only if it is the token's first
// occurrence; that block then sums the gradient rows of every occurrence in position order (a deterministic
// order, found by a ballot scan) into dwte. No atomics.
constexpr int kMatchBatch = 256;
__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* tokens, int BT, int C) {
  const int bt = blockIdx.x;
  const int tok = tokens[bt];
  bool earlier = false;
  for (int i = threadIdx.x; i < bt; i += blockDim.x) earlier |= tokens[i] == tok;
  if (__syncthreads_or(earlier)) return;  // a block of an earlier position owns this token
  __shared__ int match[kMatchBatch];
  __shared__ int count_sh, next_sh;
  int j0 = bt;
  while (true) {
    if (threadIdx.x < 32) {  // warp 0 collects the next batch of matching positions, in order
      const int lane = threadIdx.x;
      int count = 0, j = j0;
      while (j < BT && count <= kMatchBatch - 32) {
        const bool hit = j + lane < BT && tokens[j + lane] == tok;
        const unsigned ballot = __ballot_sync(0xffffffffu, hit);
        if (hit) match[count + __popc(ballot & ((1u << lane) - 1u))] = j + lane;
        count += __popc(ballot);
        j += 32;
      }
      if (lane == 0) {
        count_sh = count;
        next_sh = j;
      }
    }
    __syncthreads();
    const int n = count_sh;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float acc = 0.0f;
      for (int q = 0; q < n; q++) acc += dout[static_cast<std::size_t>(match[q]) * C + c];
      if (n > 0) dwte[static_cast<std::size_t>(tok) * C + c] += acc;
    }
    j0 = next_sh;
    __syncthreads();  // match / count_sh are rewritten by the next batch
    if (j0 >= BT) break;
  }
}

// ------------------------------------------------------------------------------------------------ layernorm
// One warp per row of C.
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const float* x = inp + static_cast<std::size_t>(row) * C;
  float m = 0.0f;
  for (int c = lane; c < C; c += 32) m += x[c];
  m = warp_sum(m) / C;
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  v = warp_sum(v) / C;
  const float s = 1.0f / sqrtf(v + kLnEps);
  float* o = out + static_cast<std::size_t>(row) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * s * weight[c] + bias[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                                const float* mean, const float* rstd, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= N) return;
  const std::size_t off = static_cast<std::size_t>(row) * C;
  const float* x = inp + off;
  const float* d = dout + off;
  float* dx = dinp + off;
  const float m = mean[row], s = rstd[row];
  float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dn = weight[c] * d[c];
    dnorm_mean += dn;
    dnorm_norm_mean += dn * (x[c] - m) * s;
  }
  dnorm_mean = warp_sum(dnorm_mean) / C;
  dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
  for (int c = lane; c < C; c += 32) {
    const float norm = (x[c] - m) * s;
    dx[c] += (weight[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// partial [2, chunks, C]: dweight partials then dbias partials (as column_partial_kernel, two sums).
__global__ void layernorm_weight_partial_kernel(float* partial, const float* dout, const float* inp, const float* mean,
                                                const float* rstd, int N, int C) {
  __shared__ float shw[8][kColumnTile], shb[8][kColumnTile];
  const int c = blockIdx.x * kColumnTile + threadIdx.x;
  const int r0 = blockIdx.y * kColumnRowsPerChunk;
  const int r1 = min(N, r0 + kColumnRowsPerChunk);
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int r = r0 + threadIdx.y; r < r1; r += 8) {
      const std::size_t i = static_cast<std::size_t>(r) * C + c;
      dw += dout[i] * (inp[i] - mean[r]) * rstd[r];
      db += dout[i];
    }
  }
  shw[threadIdx.y][threadIdx.x] = dw;
  shb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    float sw = 0.0f, sb = 0.0f;
    for (int y = 0; y < 8; y++) {
      sw += shw[y][threadIdx.x];
      sb += shb[y][threadIdx.x];
    }
    const std::size_t chunks = gridDim.y;
    partial[static_cast<std::size_t>(blockIdx.y) * C + c] = sw;
    partial[(chunks + blockIdx.y) * C + c] = sb;
  }
}

// ------------------------------------------------------------------------------------------------ attention
// Fused causal attention (FlashAttention's algorithm), one head of one sequence per block column: no [T,T]
// matrix. A block of kRows threads holds kRows consecutive rows (one per thread, in registers) and streams the
// other side's rows through shared memory in tiles of kRows. Forward: a thread per query, online softmax over
// the key tiles (the accumulated output is rescaled when the row's maximum grows), the row's log-sum-exp kept.
// Backward (FlashAttention-2's split, so that no two threads add into one element and the sums keep a fixed
// order): a thread per query for dq, a thread per key for dk and dv, each probability recomputed from the
// log-sum-exp; delta = dout . out per query first. Head sizes 4 .. 128, powers of two (template argument); the tile
// height halves for 128 so that shared memory stays at 32 KB per block.
template <int HS>
__host__ __device__ constexpr int attn_rows() {
  return HS <= 64 ? 32 : 16;
}

// Row t of head h of sequence b in qkv (B,T,NH,3,HS): q at +0, k at +HS, v at +2HS.
__device__ __forceinline__ std::size_t qkv_row(int b, int t, int h, int T, int NH, int hs) {
  return (static_cast<std::size_t>(b) * T + t) * 3 * NH * hs + static_cast<std::size_t>(3) * h * hs;
}
__device__ __forceinline__ std::size_t out_row(int b, int t, int h, int T, int NH, int hs) {
  return (static_cast<std::size_t>(b) * T + t) * NH * hs + static_cast<std::size_t>(h) * hs;
}

// Copies rows r0 .. r0+kRows-1 (those < T) of part `part` of head h into tile[kRows][HS]; zeros beyond T.
template <int HS, int kRows>
__device__ void load_tile(float (*tile)[HS], const float* src, int part, int b, int h, int r0, int T, int NH,
                          bool qkv_layout) {
  for (int e = threadIdx.x; e < kRows * HS; e += blockDim.x) {
    const int r = e / HS, i = e % HS, t = r0 + r;
    float v = 0.0f;
    if (t < T) v = qkv_layout ? src[qkv_row(b, t, h, T, NH, HS) + part * HS + i] : src[out_row(b, t, h, T, NH, HS) + i];
    tile[r][i] = v;
  }
}

template <int HS>
__global__ void flash_forward_kernel(float* out, float* lse, const float* qkv, int T, int NH, float scale) {
  constexpr int R = attn_rows<HS>();
  __shared__ float ks[R][HS], vs[R][HS];
  const int h = blockIdx.y, b = blockIdx.z, t0 = blockIdx.x * R, t = t0 + threadIdx.x;
  const bool live = t < T;
  float q[HS], acc[HS];
  for (int i = 0; i < HS; i++) {
    q[i] = live ? qkv[qkv_row(b, t, h, T, NH, HS) + i] : 0.0f;
    acc[i] = 0.0f;
  }
  float maxv = -FLT_MAX, sum = 0.0f;
  const int last = min(t0 + R, T) - 1;  // the block's last query: keys beyond it are masked for every thread
  for (int j0 = 0; j0 <= last; j0 += R) {
    __syncthreads();
    load_tile<HS, R>(ks, qkv, 1, b, h, j0, T, NH, true);
    load_tile<HS, R>(vs, qkv, 2, b, h, j0, T, NH, true);
    __syncthreads();
    if (!live) continue;
    const int n = min(R, t - j0 + 1);  // keys j0 .. t of this tile
    if (n <= 0) continue;
    float sc[R];
    float block_max = -FLT_MAX;
    for (int j = 0; j < n; j++) {
      float d = 0.0f;
      for (int i = 0; i < HS; i++) d += q[i] * ks[j][i];
      sc[j] = d * scale;
      block_max = fmaxf(block_max, sc[j]);
    }
    if (block_max > maxv) {
      const float c = expf(maxv - block_max);
      sum *= c;
      for (int i = 0; i < HS; i++) acc[i] *= c;
      maxv = block_max;
    }
    for (int j = 0; j < n; j++) {
      const float p = expf(sc[j] - maxv);
      sum += p;
      for (int i = 0; i < HS; i++) acc[i] += p * vs[j][i];
    }
  }
  if (!live) return;
  const float inv = 1.0f / sum;
  float* o = out + out_row(b, t, h, T, NH, HS);
  for (int i = 0; i < HS; i++) o[i] = acc[i] * inv;
  lse[(static_cast<std::size_t>(b) * NH + h) * T + t] = maxv + logf(sum);
}

// delta[b,h,t] = dout[b,t,h,:] . out[b,t,h,:], one thread per row.
__global__ void attention_delta_kernel(float* delta, const float* dout, const float* out, int B, int T, int NH,
                                       int hs) {
  const std::size_t rows = static_cast<std::size_t>(B) * NH * T;
  GRID_STRIDE(r, rows) {
    const int t = static_cast<int>(r % T), h = static_cast<int>((r / T) % NH), b = static_cast<int>(r / T / NH);
    const std::size_t o = out_row(b, t, h, T, NH, hs);
    float d = 0.0f;
    for (int i = 0; i < hs; i++) d += dout[o + i] * out[o + i];
    delta[r] = d;
  }
}

// dq of R queries per block: keys 0 .. t streamed through shared memory.
template <int HS>
__global__ void flash_backward_dq_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                         const float* delta, int T, int NH, float scale) {
  constexpr int R = attn_rows<HS>();
  __shared__ float ks[R][HS], vs[R][HS];
  const int h = blockIdx.y, b = blockIdx.z, t0 = blockIdx.x * R, t = t0 + threadIdx.x;
  const bool live = t < T;
  float q[HS], d[HS], dq[HS];
  const std::size_t qr = live ? qkv_row(b, t, h, T, NH, HS) : 0, orow = live ? out_row(b, t, h, T, NH, HS) : 0;
  for (int i = 0; i < HS; i++) {
    q[i] = live ? qkv[qr + i] : 0.0f;
    d[i] = live ? dout[orow + i] : 0.0f;
    dq[i] = 0.0f;
  }
  const std::size_t r = (static_cast<std::size_t>(b) * NH + h) * T + (live ? t : 0);
  const float m = live ? lse[r] : 0.0f, D = live ? delta[r] : 0.0f;
  const int last = min(t0 + R, T) - 1;
  for (int j0 = 0; j0 <= last; j0 += R) {
    __syncthreads();
    load_tile<HS, R>(ks, qkv, 1, b, h, j0, T, NH, true);
    load_tile<HS, R>(vs, qkv, 2, b, h, j0, T, NH, true);
    __syncthreads();
    if (!live) continue;
    const int n = min(R, t - j0 + 1);
    for (int j = 0; j < n; j++) {
      float s = 0.0f, dp = 0.0f;
      for (int i = 0; i < HS; i++) {
        s += q[i] * ks[j][i];
        dp += d[i] * vs[j][i];
      }
      const float p = expf(s * scale - m), ds = p * (dp - D) * scale;
      for (int i = 0; i < HS; i++) dq[i] += ds * ks[j][i];
    }
  }
  if (!live) return;
  for (int i = 0; i < HS; i++) dqkv[qr + i] = dq[i];
}

// dk and dv of R keys per block: queries j .. T-1 (with their dout, lse and delta) streamed through shared memory.
template <int HS>
__global__ void flash_backward_dkdv_kernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                                           const float* delta, int T, int NH, float scale) {
  constexpr int R = attn_rows<HS>();
  __shared__ float qs[R][HS], ds_[R][HS], ms[R], Ds[R];
  const int h = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * R, j = j0 + threadIdx.x;
  const bool live = j < T;
  float k[HS], v[HS], dk[HS], dv[HS];
  const std::size_t kr = live ? qkv_row(b, j, h, T, NH, HS) : 0;
  for (int i = 0; i < HS; i++) {
    k[i] = live ? qkv[kr + HS + i] : 0.0f;
    v[i] = live ? qkv[kr + 2 * HS + i] : 0.0f;
    dk[i] = 0.0f;
    dv[i] = 0.0f;
  }
  const std::size_t rbase = (static_cast<std::size_t>(b) * NH + h) * T;
  for (int i0 = j0; i0 < T; i0 += R) {  // query tiles from the block's first key on (earlier ones are masked)
    __syncthreads();
    load_tile<HS, R>(qs, qkv, 0, b, h, i0, T, NH, true);
    load_tile<HS, R>(ds_, dout, 0, b, h, i0, T, NH, false);
    for (int e = threadIdx.x; e < R; e += blockDim.x) {
      ms[e] = i0 + e < T ? lse[rbase + i0 + e] : 0.0f;
      Ds[e] = i0 + e < T ? delta[rbase + i0 + e] : 0.0f;
    }
    __syncthreads();
    if (!live) continue;
    for (int r = max(0, j - i0); r < R && i0 + r < T; r++) {  // queries i >= j
      float s = 0.0f, dp = 0.0f;
      for (int i = 0; i < HS; i++) {
        s += qs[r][i] * k[i];
        dp += ds_[r][i] * v[i];
      }
      const float p = expf(s * scale - ms[r]), dsc = p * (dp - Ds[r]) * scale;
      for (int i = 0; i < HS; i++) {
        dv[i] += p * ds_[r][i];
        dk[i] += dsc * qs[r][i];
      }
    }
  }
  if (!live) return;
  for (int i = 0; i < HS; i++) {
    dqkv[kr + HS + i] = dk[i];
    dqkv[kr + 2 * HS + i] = dv[i];
  }
}

// ------------------------------------------------------------------------------------------------ pointwise
__global__ void gelu_forward_kernel(float* out, const float* inp, std::size_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
  }
}

__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, std::size_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluScale * (x + 0.044715f * x * x * x);
    const float th = tanhf(u);
    const float sech2 = 1.0f - th * th;
    const float grad = 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = grad * dout[i];
  }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

// ------------------------------------------------------------------------------------------------ delay
__global__ void delay_kernel(long long ns) {
  unsigned long long start = 0, now = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (static_cast<long long>(now - start) < ns);
}

// ------------------------------------------------------------------------------------------------ loss
// One block per row of V logits: softmax and the token loss, fused.
__global__ void crossentropy_forward_kernel(float* losses, float* probs, const float* logits, const int* targets,
                                            int V) {
  const std::size_t row = blockIdx.x;
  const float* l = logits + row * V;
  float* p = probs + row * V;
  float maxv = -FLT_MAX;
  for (int v = threadIdx.x; v < V; v += blockDim.x) maxv = fmaxf(maxv, l[v]);
  maxv = block_max(maxv);
  float sum = 0.0f;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float e = expf(l[v] - maxv);
    p[v] = e;
    sum += e;
  }
  sum = block_sum(sum);
  const float inv = 1.0f / sum;
  for (int v = threadIdx.x; v < V; v += blockDim.x) p[v] *= inv;
  if (threadIdx.x == 0) losses[row] = -(l[targets[row]] - maxv - logf(sum));
}

__global__ void crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets, float scale, int V,
                                             std::size_t n) {
  GRID_STRIDE(i, n) {
    const std::size_t row = i / V;
    const int v = static_cast<int>(i % V);
    const float d = scale * probs[i];
    dlogits[i] = v == targets[row] ? d - scale : d;
  }
}

// Vocabulary-parallel loss (crossentropy.hpp): one block per token row of a group's nv logits. The block's
// reductions run in a fixed order, so a group's statistics are the same bits on the owner and on a helper.
__global__ void vocab_stats_kernel(float* mx, float* sum, float* target_logit, const float* logits, const int* targets,
                                   int v0, int nv) {
  const std::size_t row = blockIdx.x;
  const float* l = logits + row * nv;
  float m = -FLT_MAX;
  for (int v = threadIdx.x; v < nv; v += blockDim.x) m = fmaxf(m, l[v]);
  m = block_max(m);
  float s = 0.0f;
  for (int v = threadIdx.x; v < nv; v += blockDim.x) s += expf(l[v] - m);
  s = block_sum(s);
  if (threadIdx.x == 0) {
    mx[row] = m;
    sum[row] = s;
    const int t = targets[row] - v0;
    target_logit[row] = t >= 0 && t < nv ? l[t] : 0.0f;
  }
}

// One thread per token: the groups in index order.
__global__ void vocab_loss_kernel(float* losses, float* M, float* S, const float* stats, const int* targets, int G,
                                  int V, std::size_t bt) {
  GRID_STRIDE(i, bt) {
    float m = -FLT_MAX, s = 0.0f;
    for (int k = 0; k < G; ++k) m = fmaxf(m, stats[3 * bt * k + i]);
    for (int k = 0; k < G; ++k) s += stats[3 * bt * k + bt + i] * expf(stats[3 * bt * k + i] - m);
    int holder = 0;
    while (holder + 1 < G && static_cast<long long>(holder + 1) * V / G <= targets[i]) ++holder;
    M[i] = m;
    S[i] = s;
    losses[i] = -(stats[3 * bt * holder + 2 * bt + i] - m - logf(s));
  }
}

__global__ void vocab_dlogits_kernel(float* dlogits, const float* logits, const int* targets, const float* M,
                                     const float* S, float dloss, int v0, int nv, std::size_t n) {
  GRID_STRIDE(i, n) {
    const std::size_t row = i / nv;
    const int v = static_cast<int>(i % nv);
    const float d = dloss * (expf(logits[i] - M[row]) * (1.0f / S[row]));
    dlogits[i] = v == targets[row] - v0 ? d - dloss : d;
  }
}

// ------------------------------------------------------------------------------------------------ optimizer
__global__ void adamw_kernel(float* params, float* m, float* v, const float* grads, std::size_t n, float beta1,
                             float beta2, float eps, float grad_scale, float step_size, float bc2_sqrt, float decay) {
  GRID_STRIDE(i, n) {
    const float g = grads[i] * grad_scale;
    const float mi = beta1 * m[i] + (1.0f - beta1) * g;
    const float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] = params[i] * decay - step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
  }
}

constexpr int kSumSquaresMaxBlocks = 1024;

// partial[block] = sum over the block's grid-stride elements, tree-reduced in shared memory (fixed order).
__global__ void sum_squares_partial_kernel(double* partial, const float* x, std::size_t n) {
  __shared__ double sh[kThreads];
  double acc = 0.0;
  GRID_STRIDE(i, n) acc += static_cast<double>(x[i]) * x[i];
  sh[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) sh[threadIdx.x] += sh[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sh[0];
}

__global__ void sum_squares_finish_kernel(double* result, const double* partial, int blocks) {
  double s = 0.0;
  for (int b = 0; b < blocks; b++) s += partial[b];
  *result = s;
}

__global__ void to_bf16_kernel(__nv_bfloat16* out, const float* in, std::size_t n) {
  GRID_STRIDE(i, n) out[i] = __float2bfloat16_rn(in[i]);
}

unsigned row_grid(int rows) { return static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)); }

// ================================================================================================ helpers
CudaContext& context(Backend& be) {
  // This file's kernels sit only in the table of CudaBackend (kernel_table()), so be is a CudaBackend.
  return static_cast<CudaBackend&>(be).context();
}

int column_chunks(int N) { return N <= 0 ? 1 : (N + kColumnRowsPerChunk - 1) / kColumnRowsPerChunk; }

// out [N,C] = column sums of in [N,C] in two deterministic passes: partial sums over fixed row chunks (written
// to partial, column_chunks(N) * C floats), then the chunks in order, added to out.
void column_sums(float* out, const float* in, int N, int C, float* partial, cudaStream_t s) {
  const int chunks = column_chunks(N);
  const dim3 grid((C + kColumnTile - 1) / kColumnTile, chunks), block(kColumnTile, 8);
  column_partial_kernel<<<grid, block, 0, s>>>(partial, in, N, C);
  cudaCheckLaunch();
  column_finish_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(out, partial, chunks, C);
  cudaCheckLaunch();
}

void to_bf16(void* out, const float* in, std::size_t N, cudaStream_t s) {
  if (N == 0) return;
  to_bf16_kernel<<<grid_for(N), kThreads, 0, s>>>(static_cast<__nv_bfloat16*>(out), in, N);
  cudaCheckLaunch();
}

// Row-major C[m,n] = alpha op(A) op(B) + beta C with explicit leading dimensions and a batch of `batch`
// products separated by the given strides (elements); fp32 / TF32 (the strided operands of attention).
// Row-major C = A B is column-major C^T = B^T A^T: swap the operands and the m/n roles; a stored row-major
// matrix read column-major is its transpose, so each operand keeps its own transpose flag.
struct Strided {
  const float* p;
  bool trans;
  int ld;
  long long stride;
};
void sgemm_strided(CudaContext& cx, float* c, int ldc, long long stride_c, Strided a, Strided b, int m, int n, int k,
                   int batch, float alpha, float beta) {
  const cublasOperation_t op_a = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    cublasCheck(cx.blas->sgemm(cx.cublas, op_b, op_a, n, m, k, &alpha, b.p, b.ld, a.p, a.ld, &beta, c, ldc));
  } else {
    cublasCheck(cx.blas->sgemm_strided_batched(cx.cublas, op_b, op_a, n, m, k, &alpha, b.p, b.ld, b.stride, a.p, a.ld,
                                               a.stride, &beta, c, ldc, stride_c, batch));
  }
}

// c [m,n] = op(a) @ op(b) (+ c when acc), op(a) [m,k] (a stored [k,m] when trans_a), op(b) [k,n] (b stored [n,k]
// when trans_b): the one GEMM of the linear layers, fp32 / TF32 or bf16 operands per the backend's precision.
void gemm(CudaContext& cx, float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b,
          Accumulate acc) {
  const float alpha = 1.0f, beta = acc == Accumulate::yes ? 1.0f : 0.0f;
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // c = beta * c, as the CPU kernel
    const std::size_t n_c = static_cast<std::size_t>(m) * n;
    scale_kernel<<<grid_for(n_c), kThreads, 0, cx.stream>>>(c, beta, n_c);
    cudaCheckLaunch();
    return;
  }
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  if (cx.precision == Precision::fp32) {
    sgemm_strided(cx, c, ldc, 0, {a, trans_a, lda, 0}, {b, trans_b, ldb, 0}, m, n, k, 1, alpha, beta);
    return;
  }
  // bf16: operands rounded to bf16 (tensor cores), products accumulated in fp32 and written to fp32 C.
  const std::size_t na = static_cast<std::size_t>(m) * k, nb = static_cast<std::size_t>(k) * n;
  void* a16 = cx.operand_a.get(na * 2, cx.stream);
  void* b16 = cx.operand_b.get(nb * 2, cx.stream);
  to_bf16(a16, a, na, cx.stream);
  to_bf16(b16, b, nb, cx.stream);
  cublasCheck(cx.blas->gemm_ex(cx.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                               m, k, &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                               CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

int sum_squares_blocks(std::size_t N) {
  const std::size_t per_block = static_cast<std::size_t>(kThreads) * 16;  // >= 16 elements per thread
  const std::size_t b = (N + per_block - 1) / per_block;
  return static_cast<int>(b < 1 ? 1 : (b > kSumSquaresMaxBlocks ? kSumSquaresMaxBlocks : b));
}

// *result = sum x^2 in double; partial: sum_squares_blocks(N) doubles
void launch_sum_squares(double* result, double* partial, const float* x, std::size_t N, cudaStream_t s) {
  const int blocks = sum_squares_blocks(N);
  sum_squares_partial_kernel<<<blocks, kThreads, 0, s>>>(partial, x, N);
  cudaCheckLaunch();
  sum_squares_finish_kernel<<<1, 1, 0, s>>>(result, partial, blocks);
  cudaCheckLaunch();
}

}  // namespace

// ================================================================================================ dense
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC,
                    WeightLayout layout, Accumulate acc, Backend& be) {
  CudaContext& cx = context(be);
  const int N = B * T;
  gemm(cx, out, inp, weight, N, OC, C, false, layout == WeightLayout::out_in, acc);
  const std::size_t n = static_cast<std::size_t>(N) * OC;
  if (!bias || n == 0) return;
  bias_forward_kernel<<<grid_for(n), kThreads, 0, cx.stream>>>(out, bias, n, OC);
  cudaCheckLaunch();
}

void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                           WeightLayout layout, Accumulate acc, Backend& be) {
  gemm(context(be), dinp, dout, weight, B * T, C, OC, false, layout == WeightLayout::in_out, acc);
}

void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int B, int T, int C,
                            int OC, WeightLayout layout, Backend& be) {
  CudaContext& cx = context(be);
  const int N = B * T;
  if (layout == WeightLayout::out_in) {
    gemm(cx, dweight, dout, inp, OC, C, N, true, false, Accumulate::yes);  // (OC,C) += dout^T @ inp
  } else {
    gemm(cx, dweight, inp, dout, C, OC, N, true, false, Accumulate::yes);  // (C,OC) += inp^T @ dout
  }
  if (!dbias || N <= 0 || OC <= 0) return;
  const std::size_t floats = static_cast<std::size_t>(column_chunks(N)) * OC;
  column_sums(dbias, dout, N, OC, static_cast<float*>(cx.reduce.get(floats * sizeof(float), cx.stream)), cx.stream);
}

// ================================================================================================ embedding
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C, Backend& be) {
  const std::size_t n = static_cast<std::size_t>(B) * T * C;
  if (n == 0) return;
  encoder_forward_kernel<<<grid_for(n), kThreads, 0, context(be).stream>>>(out, inp, wte, wpe, T, C, n);
  cudaCheckLaunch();
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C, Backend& be) {
  if (B <= 0 || T <= 0 || C <= 0) return;
  const cudaStream_t s = context(be).stream;
  encoder_backward_wpe_kernel<<<grid_for(static_cast<std::size_t>(T) * C), kThreads, 0, s>>>(dwpe, dout, B, T, C);
  cudaCheckLaunch();
  encoder_backward_wte_kernel<<<B * T, 128, 0, s>>>(dwte, dout, inp, B * T, C);
  cudaCheckLaunch();
}

// ================================================================================================ layernorm
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C, Backend& be) {
  const int N = B * T;
  if (N <= 0) return;
  layernorm_forward_kernel<<<row_grid(N), kThreads, 0, context(be).stream>>>(out, mean, rstd, inp, weight, bias, N, C);
  cudaCheckLaunch();
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int B, int T, int C, Backend& be) {
  const int N = B * T;
  if (N <= 0) return;
  layernorm_backward_input_kernel<<<row_grid(N), kThreads, 0, context(be).stream>>>(dinp, dout, inp, weight, mean, rstd,
                                                                                    N, C);
  cudaCheckLaunch();
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                               const float* rstd, int B, int T, int C, Backend& be) {
  const int N = B * T;
  if (N <= 0 || C <= 0) return;
  CudaContext& cx = context(be);
  const int chunks = column_chunks(N);
  auto* partial =
      static_cast<float*>(cx.reduce.get(2 * static_cast<std::size_t>(chunks) * C * sizeof(float), cx.stream));
  const dim3 grid((C + kColumnTile - 1) / kColumnTile, chunks), block(kColumnTile, 8);
  layernorm_weight_partial_kernel<<<grid, block, 0, cx.stream>>>(partial, dout, inp, mean, rstd, N, C);
  cudaCheckLaunch();
  const unsigned g = (C + kThreads - 1) / kThreads;
  column_finish_kernel<<<g, kThreads, 0, cx.stream>>>(dweight, partial, chunks, C);
  cudaCheckLaunch();
  column_finish_kernel<<<g, kThreads, 0, cx.stream>>>(dbias, partial + static_cast<std::size_t>(chunks) * C, chunks, C);
  cudaCheckLaunch();
}

// ================================================================================================ attention
// The fused kernels above, instantiated for head sizes 4 .. 128, powers of two (the head size sizes their registers
// and shared tiles at compile time); any other is an error naming the supported ones.
namespace {
template <template <int> class Launch, typename... Args>
void dispatch_head_size(int HS, Args&&... args) {
  switch (HS) {
    case 4: Launch<4>::run(args...); break;
    case 8: Launch<8>::run(args...); break;
    case 16: Launch<16>::run(args...); break;
    case 32: Launch<32>::run(args...); break;
    case 64: Launch<64>::run(args...); break;
    case 128: Launch<128>::run(args...); break;
    default:
      throw Error("cuda attention: head size " + std::to_string(HS) +
                  " (d_model / n_heads) is not supported by the fused kernel: use 4, 8, 16, 32, 64 or 128");
  }
}

dim3 attn_grid(int T, int B, int NH, int rows) {
  return dim3(static_cast<unsigned>((T + rows - 1) / rows), static_cast<unsigned>(NH), static_cast<unsigned>(B));
}

template <int HS>
struct ForwardLaunch {
  static void run(float* out, float* lse, const float* qkv, int B, int T, int NH, float scale, cudaStream_t s) {
    constexpr int R = attn_rows<HS>();
    flash_forward_kernel<HS><<<attn_grid(T, B, NH, R), R, 0, s>>>(out, lse, qkv, T, NH, scale);
    cudaCheckLaunch();
  }
};

template <int HS>
struct BackwardLaunch {
  static void run(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta, int B, int T,
                  int NH, float scale, cudaStream_t s) {
    constexpr int R = attn_rows<HS>();
    flash_backward_dq_kernel<HS><<<attn_grid(T, B, NH, R), R, 0, s>>>(dqkv, dout, qkv, lse, delta, T, NH, scale);
    cudaCheckLaunch();
    flash_backward_dkdv_kernel<HS><<<attn_grid(T, B, NH, R), R, 0, s>>>(dqkv, dout, qkv, lse, delta, T, NH, scale);
    cudaCheckLaunch();
  }
};
}  // namespace

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, Backend& be) {
  if (NH <= 0 || B <= 0 || T <= 0) return;  // an empty head range
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  const CudaContext& cx = context(be);
  if (cx.precision == Precision::bf16 && mma_attention_supported(HS)) {
    mma_attention_forward(out, lse, qkv, B, T, NH, HS, scale, cx.stream);
    return;
  }
  dispatch_head_size<ForwardLaunch>(HS, out, lse, qkv, B, T, NH, scale, cx.stream);
}

void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, Backend& be) {
  if (NH <= 0 || B <= 0 || T <= 0) return;  // an empty head range
  CudaContext& cx = context(be);
  const int HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  attention_delta_kernel<<<grid_for(static_cast<std::size_t>(B) * NH * T), kThreads, 0, cx.stream>>>(delta, dout, out,
                                                                                                     B, T, NH, HS);
  cudaCheckLaunch();
  if (cx.precision == Precision::bf16 && mma_attention_supported(HS)) {
    mma_attention_backward(dqkv, dout, qkv, lse, delta, B, T, NH, HS, scale, cx.stream);
    return;
  }
  dispatch_head_size<BackwardLaunch>(HS, dqkv, dout, qkv, lse, delta, B, T, NH, scale, cx.stream);
}

// ================================================================================================ pointwise
void gelu_forward(float* out, const float* inp, std::size_t N, Backend& be) {
  if (N == 0) return;
  gelu_forward_kernel<<<grid_for(N), kThreads, 0, context(be).stream>>>(out, inp, N);
  cudaCheckLaunch();
}

void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N, Backend& be) {
  if (N == 0) return;
  gelu_backward_kernel<<<grid_for(N), kThreads, 0, context(be).stream>>>(dinp, dout, inp, N);
  cudaCheckLaunch();
}

void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t N, Backend& be) {
  if (N == 0) return;
  residual_forward_kernel<<<grid_for(N), kThreads, 0, context(be).stream>>>(out, inp1, inp2, N);
  cudaCheckLaunch();
}

// ================================================================================================ loss
void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T, int V,
                          Backend& be) {
  const int N = B * T;
  if (N <= 0) return;
  crossentropy_forward_kernel<<<N, 512, 0, context(be).stream>>>(losses, probs, logits, targets, V);
  cudaCheckLaunch();
}

void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int B, int T, int V,
                           Backend& be) {
  const std::size_t n = static_cast<std::size_t>(B) * T * V;
  if (n == 0) return;
  crossentropy_backward_kernel<<<grid_for(n), kThreads, 0, context(be).stream>>>(dlogits, probs, targets, dloss, V, n);
  cudaCheckLaunch();
}

void vocab_stats_forward(float* mx, float* sum, float* target_logit, const float* logits, const int* targets, int v0,
                         int B, int T, int nv, Backend& be) {
  const int N = B * T;
  if (N <= 0 || nv <= 0) return;
  vocab_stats_kernel<<<N, kThreads, 0, context(be).stream>>>(mx, sum, target_logit, logits, targets, v0, nv);
  cudaCheckLaunch();
}

void vocab_loss_forward(float* losses, float* M, float* S, const float* stats, const int* targets, int G, int V, int B,
                        int T, Backend& be) {
  const std::size_t bt = static_cast<std::size_t>(B) * T;
  if (bt == 0) return;
  vocab_loss_kernel<<<grid_for(bt), kThreads, 0, context(be).stream>>>(losses, M, S, stats, targets, G, V, bt);
  cudaCheckLaunch();
}

void vocab_dlogits_backward(float* dlogits, const float* logits, const int* targets, const float* M, const float* S,
                            float dloss, int v0, int B, int T, int nv, Backend& be) {
  const std::size_t n = static_cast<std::size_t>(B) * T * nv;
  if (n == 0) return;
  vocab_dlogits_kernel<<<grid_for(n), kThreads, 0, context(be).stream>>>(dlogits, logits, targets, M, S, dloss, v0, nv,
                                                                         n);
  cudaCheckLaunch();
}

// ================================================================================================ optimizer
void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, const AdamWStep& step,
                  Backend& be) {
  if (N == 0) return;
  // The same float expressions as the CPU kernel, evaluated once on the host.
  const float bc1 = 1.0f - std::pow(step.beta1, static_cast<float>(step.t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(step.beta2, static_cast<float>(step.t)));
  const float step_size = step.lr / bc1;
  const float decay = 1.0f - step.lr * step.weight_decay;
  adamw_kernel<<<grid_for(N), kThreads, 0, context(be).stream>>>(params, m, v, grads, N, step.beta1, step.beta2,
                                                                 step.eps, step.grad_scale, step_size, bc2_sqrt, decay);
  cudaCheckLaunch();
}

double sum_squares(const float* x, std::size_t N, Backend& be) {
  if (N == 0) return 0.0;
  CudaContext& cx = context(be);
  const int blocks = sum_squares_blocks(N);
  auto* dev = static_cast<double*>(cx.reduce.get((blocks + 1) * sizeof(double), cx.stream));
  launch_sum_squares(dev + blocks, dev, x, N, cx.stream);
  cudaCheck(cudaMemcpyAsync(cx.host_result, dev + blocks, sizeof(double), cudaMemcpyDeviceToHost, cx.stream));
  cudaCheck(cudaStreamSynchronize(cx.stream));  // the value is returned to the host
  return *cx.host_result;
}

void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count, Backend& be) {
  if (count <= 0) return;
  CudaContext& cx = context(be);
  // Layout in the scratch: count results, then each tensor's partial sums.
  std::size_t slots = static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    if (ns[i] > 0) slots += static_cast<std::size_t>(sum_squares_blocks(ns[i]));
  }
  auto* dev = static_cast<double*>(cx.reduce.get(slots * sizeof(double), cx.stream));
  cudaCheck(cudaMemsetAsync(dev, 0, static_cast<std::size_t>(count) * sizeof(double), cx.stream));  // empty tensors
  std::size_t partial = static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    if (ns[i] == 0) continue;
    launch_sum_squares(dev + i, dev + partial, xs[i], ns[i], cx.stream);
    partial += static_cast<std::size_t>(sum_squares_blocks(ns[i]));
  }
  // To pageable memory: returns once the copy is done (the one host round trip of the whole norm).
  cudaCheck(
      cudaMemcpyAsync(out, dev, static_cast<std::size_t>(count) * sizeof(double), cudaMemcpyDeviceToHost, cx.stream));
  cudaCheck(cudaStreamSynchronize(cx.stream));
}

// ================================================================================================ backend
void launch_delay(long long ns, cudaStream_t s) {
  if (ns <= 0) return;
  delay_kernel<<<1, 1, 0, s>>>(ns);
  cudaCheckLaunch();
}

const KernelTable& kernel_table() {
  static const KernelTable table = [] {
    KernelTable k;
    k.matmul_forward = cuda::matmul_forward;
    k.matmul_backward_input = cuda::matmul_backward_input;
    k.matmul_backward_weight = cuda::matmul_backward_weight;
    k.encoder_forward = cuda::encoder_forward;
    k.encoder_backward = cuda::encoder_backward;
    k.layernorm_forward = cuda::layernorm_forward;
    k.layernorm_backward_input = cuda::layernorm_backward_input;
    k.layernorm_backward_weight = cuda::layernorm_backward_weight;
    k.attention_forward = cuda::attention_forward;
    k.attention_backward = cuda::attention_backward;
    k.gelu_forward = cuda::gelu_forward;
    k.gelu_backward = cuda::gelu_backward;
    k.residual_forward = cuda::residual_forward;
    k.crossentropy_forward = cuda::crossentropy_forward;
    k.crossentropy_backward = cuda::crossentropy_backward;
    k.vocab_stats_forward = cuda::vocab_stats_forward;
    k.vocab_loss_forward = cuda::vocab_loss_forward;
    k.vocab_dlogits_backward = cuda::vocab_dlogits_backward;
    k.adamw_update = cuda::adamw_update;
    k.sum_squares = cuda::sum_squares;
    k.sum_squares_each = cuda::sum_squares_each;
    return k;
  }();
  return table;
}

}  // namespace conductor::model::cuda
