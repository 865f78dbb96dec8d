#pragma once
// LayerNorm (eps 1e-5), with the backward split into the input part (B) and the weight part (W).
// Conventions: matmul.hpp.
namespace conductor::model {

class Backend;

// out: (B,T,C), mean: (B,T), rstd: (B,T), inp: (B,T,C), weight: (C), bias: (C)
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int B, int T, int C, Backend& be);
// dinp += d(LN)/d(inp) applied to dout
// dinp: (B,T,C), dout: (B,T,C), inp: (B,T,C), weight: (C), mean: (B,T), rstd: (B,T)
void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight, const float* mean,
                              const float* rstd, int B, int T, int C, Backend& be);
// dweight += sum over (b,t) of dout * normalized(inp); dbias += sum over (b,t) of dout
// dweight: (C), dbias: (C), dout: (B,T,C), inp: (B,T,C), mean: (B,T), rstd: (B,T)
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                               const float* rstd, int B, int T, int C, Backend& be);

}  // namespace conductor::model
