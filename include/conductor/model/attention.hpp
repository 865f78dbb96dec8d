#pragma once
// Causal softmax attention over heads grouped as qkv [B,T,NH,3,HS].
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS);
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                        int NH, int HS);

}  // namespace conductor::model::cpu
