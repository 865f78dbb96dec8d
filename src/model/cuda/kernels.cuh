#pragma once
// Launchers of our CUDA kernels (kernels.cu). Same shapes and accumulate semantics as Backend (backend.hpp);
// every launcher queues work on `s` and returns without synchronising. Private to the CUDA backend.
#include <cuda_runtime.h>

#include <cstddef>

namespace conductor::model::cuda::kernels {

// c[i] = beta * c[i] (beta == 0 writes zeros, so NaNs in c do not survive, as with BLAS)
void scale(float* c, float beta, std::size_t n, cudaStream_t s);
// out [N,OC] += bias [OC]
void bias_forward(float* out, const float* bias, int N, int OC, cudaStream_t s);
// Column reductions run in two deterministic passes: partial sums over fixed row chunks, then the chunks in order.
int column_chunks(int N);  // rows are split into this many chunks (a function of N only)
// dbias [OC] += sum over rows of dout [N,OC]; partial: column_chunks(N) * OC floats
void bias_backward(float* dbias, const float* dout, int N, int OC, float* partial, cudaStream_t s);

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t s);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C,
                      cudaStream_t s);

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C, cudaStream_t s);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int N, int C, cudaStream_t s);
// partial: 2 * column_chunks(N) * C floats
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                               const float* rstd, int N, int C, float* partial, cudaStream_t s);

// Rows of att [rows/T, T, T] hold scaled scores; each becomes the causal softmax (zeros above the diagonal).
void causal_softmax_forward(float* att, int BNH, int T, cudaStream_t s);
// datt [BNH,T,T] (gradient of the probabilities) becomes the gradient of the scaled scores times `scale`
// (zeros above the diagonal).
void causal_softmax_backward(float* datt, const float* att, float scale, int BNH, int T, cudaStream_t s);

void gelu_forward(float* out, const float* inp, std::size_t N, cudaStream_t s);
void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N, cudaStream_t s);
void residual_forward(float* out, const float* a, const float* b, std::size_t N, cudaStream_t s);

void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int N, int V,
                          cudaStream_t s);
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int N, int V,
                           cudaStream_t s);

// step_size = lr / (1 - beta1^t), bc2_sqrt = sqrt(1 - beta2^t), decay = 1 - lr * weight_decay (host-computed
// in float exactly as the CPU kernel does).
void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float beta1, float beta2,
                  float eps, float grad_scale, float step_size, float bc2_sqrt, float decay, cudaStream_t s);

int sum_squares_blocks(std::size_t N);  // partial sums needed (a function of N only)
// *result = sum x^2 in double; partial: sum_squares_blocks(N) doubles
void sum_squares(double* result, double* partial, const float* x, std::size_t N, cudaStream_t s);

// Occupies the stream for `ns` nanoseconds of GPU time (one thread polling %globaltimer): the noise model's
// injected delay, on the device so it delays exactly the ops queued behind it.
void delay(long long ns, cudaStream_t s);

// out (bf16) [N] = round-to-nearest-even(in [N])
void to_bf16(void* out, const float* in, std::size_t N, cudaStream_t s);

}  // namespace conductor::model::cuda::kernels
