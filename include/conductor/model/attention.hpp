#pragma once
// Causal self-attention over NH heads of size HS = C / NH (llm.c's attention_*). Conventions: matmul.hpp.
// qkv is grouped per head, (B,T,NH,3,HS): q, k and v of head h are contiguous, so a group of heads is a
// contiguous block of the fused QKV projection (block.hpp).
namespace conductor::model {

class Backend;

// out: (B,T,C), att: (B,NH,T,T) softmax probabilities (zero above the diagonal), qkv: (B,T,NH,3,HS)
void attention_forward(float* out, float* att, const float* qkv, int B, int T, int C, int NH, Backend& be);
// dqkv (overwritten): (B,T,NH,3,HS), datt: (B,NH,T,T) scratch, dout: (B,T,C), qkv: (B,T,NH,3,HS), att: (B,NH,T,T)
void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                        int C, int NH, Backend& be);

}  // namespace conductor::model
