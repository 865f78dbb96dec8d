// The kernel functions: each runs the implementation of the backend it is given (kernel_table.hpp). One line
// per kernel; the signatures, shapes and semantics are in the family headers.
#include "conductor/model/backend.hpp"
#include "kernel_table.hpp"

namespace conductor::model {

void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC,
                    WeightLayout layout, Accumulate acc, Backend& be) {
  be.kernels().matmul_forward(out, inp, weight, bias, B, T, C, OC, layout, acc, be);
}
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                           WeightLayout layout, Accumulate acc, Backend& be) {
  be.kernels().matmul_backward_input(dinp, dout, weight, B, T, C, OC, layout, acc, be);
}
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int B, int T, int C,
                            int OC, WeightLayout layout, Backend& be) {
  be.kernels().matmul_backward_weight(dweight, dbias, dout, inp, B, T, C, OC, layout, be);
}

void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C, Backend& be) {
  be.kernels().encoder_forward(out, inp, wte, wpe, B, T, C, be);
}
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C, Backend& be) {
  be.kernels().encoder_backward(dwte, dwpe, dout, inp, B, T, C, be);
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C, Backend& be) {
  be.kernels().layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C, be);
}
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int B, int T, int C, Backend& be) {
  be.kernels().layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, B, T, C, be);
}
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                               const float* rstd, int B, int T, int C, Backend& be) {
  be.kernels().layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, B, T, C, be);
}

void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, Backend& be) {
  be.kernels().attention_forward(out, lse, qkv, B, T, C, NH, be);
}
void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, Backend& be) {
  be.kernels().attention_backward(dqkv, delta, dout, qkv, out, lse, B, T, C, NH, be);
}

void gelu_forward(float* out, const float* inp, std::size_t N, Backend& be) {
  be.kernels().gelu_forward(out, inp, N, be);
}
void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N, Backend& be) {
  be.kernels().gelu_backward(dinp, dout, inp, N, be);
}
void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t N, Backend& be) {
  be.kernels().residual_forward(out, inp1, inp2, N, be);
}

void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T, int V,
                          Backend& be) {
  be.kernels().crossentropy_forward(losses, probs, logits, targets, B, T, V, be);
}
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float dloss, int B, int T, int V,
                           Backend& be) {
  be.kernels().crossentropy_backward(dlogits, probs, targets, dloss, B, T, V, be);
}

void vocab_stats_forward(float* mx, float* sum, float* target_logit, const float* logits, const int* targets, int v0,
                         int B, int T, int nv, Backend& be) {
  be.kernels().vocab_stats_forward(mx, sum, target_logit, logits, targets, v0, B, T, nv, be);
}
void vocab_loss_forward(float* losses, float* M, float* S, const float* stats, const int* targets, int G, int V, int B,
                        int T, Backend& be) {
  be.kernels().vocab_loss_forward(losses, M, S, stats, targets, G, V, B, T, be);
}
void vocab_dlogits_backward(float* dlogits, const float* logits, const int* targets, const float* M, const float* S,
                            float dloss, int v0, int B, int T, int nv, Backend& be) {
  be.kernels().vocab_dlogits_backward(dlogits, logits, targets, M, S, dloss, v0, B, T, nv, be);
}

void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, const AdamWStep& step,
                  Backend& be) {
  be.kernels().adamw_update(params, m, v, grads, N, step, be);
}
double sum_squares(const float* x, std::size_t N, Backend& be) { return be.kernels().sum_squares(x, N, be); }
void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count, Backend& be) {
  be.kernels().sum_squares_each(out, xs, ns, count, be);
}

}  // namespace conductor::model
