#pragma once
// LayerNorm, with the backward split into the input part (B) and the weight part (W).
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int B, int T, int C);
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                               const float* rstd, int B, int T, int C);

}  // namespace conductor::model::cpu
