#pragma once
// Softmax cross-entropy over the vocabulary.
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T, int V);
void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B, int T, int V);

}  // namespace conductor::model::cpu
