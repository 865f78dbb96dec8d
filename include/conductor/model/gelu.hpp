#pragma once
// GELU (tanh approximation) and residual adds.
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void gelu_forward(float* out, const float* inp, std::size_t N);
void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N);
void residual_forward(float* out, const float* a, const float* b, std::size_t N);

}  // namespace conductor::model::cpu
