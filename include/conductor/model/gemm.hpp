#pragma once
// Dense products through cblas_sgemm, and bias add/reduce.
// CPU reference kernels (OpenMP, fp32); the shapes and accumulate semantics are those of Backend (backend.hpp).
#include <cstddef>

namespace conductor::model::cpu {

void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b, float alpha,
          float beta);
void bias_forward(float* out, const float* bias, int N, int OC);
void bias_backward(float* dbias, const float* dout, int N, int OC);

}  // namespace conductor::model::cpu
