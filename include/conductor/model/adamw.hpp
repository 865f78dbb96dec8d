#pragma once
// The optimizer's kernels: the AdamW update and the deterministic squared norms of global-norm clipping.
// Conventions: matmul.hpp.
#include <cstddef>

namespace conductor::model {

class Backend;

// One AdamW update (PyTorch semantics): the gradient used is grads * grad_scale (global-norm clipping).
struct AdamWStep {
  float lr = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  float grad_scale = 1.0f;
  int t = 1;  // 1-based count of updates, for the bias corrections
};

// params, m, v: (N) updated in place, grads: (N)
void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, const AdamWStep& step,
                  Backend& be);
// sum of x^2 in double, deterministic for a given N (independent of thread timing); x: (N)
double sum_squares(const float* x, std::size_t N, Backend& be);
// out[i] = sum_squares(xs[i], ns[i]) for `count` tensors, equal to the one-tensor call bit for bit; a device
// backend reads all results back in one host round trip (the gradient norm covers every parameter tensor).
void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count, Backend& be);

}  // namespace conductor::model
