#pragma once
// Token + position embedding.
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);

}  // namespace conductor::model::cpu
