#pragma once
// Pointwise kernels: GELU (tanh approximation, GPT-2) and the residual add. Conventions: matmul.hpp.
#include <cstddef>

namespace conductor::model {

class Backend;

// out: (N), inp: (N)
void gelu_forward(float* out, const float* inp, std::size_t N, Backend& be);
// dinp = dout * gelu'(inp); dinp may alias dout
// dinp: (N), dout: (N), inp: (N)
void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N, Backend& be);
// out = inp1 + inp2; out may alias either input
// out: (N), inp1: (N), inp2: (N)
void residual_forward(float* out, const float* inp1, const float* inp2, std::size_t N, Backend& be);

}  // namespace conductor::model
