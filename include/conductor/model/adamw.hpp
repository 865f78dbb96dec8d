#pragma once
// AdamW update and the deterministic squared norm used for global-norm clipping.
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float lr, float beta1,
                  float beta2, float eps, float weight_decay, float grad_scale, int t);
double sum_squares(const float* x, std::size_t N);

}  // namespace conductor::model::cpu
