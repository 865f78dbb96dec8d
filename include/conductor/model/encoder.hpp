#pragma once
// Token + position embedding (llm.c's encoder_*). Conventions: matmul.hpp.
namespace conductor::model {

class Backend;

// out = wte[inp[b,t]] + wpe[t]
// out: (B,T,C), inp: (B,T) token ids, wte: (V,C), wpe: (maxT,C)
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C, Backend& be);
// dwte, dwpe += the rows of dout scattered back to their token / position
// dwte: (V,C), dwpe: (maxT,C), dout: (B,T,C), inp: (B,T)
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C, Backend& be);

}  // namespace conductor::model
