#pragma once
// Causal self-attention over NH heads of size HS = C / NH, fused (FlashAttention's algorithm): the [T,T]
// probabilities are never stored; the forward keeps each row's log-sum-exp of the scaled scores instead, from
// which the backward recomputes them. Conventions: matmul.hpp.
// qkv is grouped per head, (B,T,NH,3,HS): q, k and v of head h are contiguous, so a group of heads is a
// contiguous block of the fused QKV projection (block.hpp).
namespace conductor::model {

class Backend;

// out: (B,T,C), lse: (B,NH,T) log-sum-exp of row t's scores q_t.k_j / sqrt(HS), j <= t; qkv: (B,T,NH,3,HS)
void attention_forward(float* out, float* lse, const float* qkv, int B, int T, int C, int NH, Backend& be);
// dqkv (overwritten): (B,T,NH,3,HS), delta: (B,NH,T) scratch (dout . out per row), dout: (B,T,C),
// qkv: (B,T,NH,3,HS), out and lse: the forward's
void attention_backward(float* dqkv, float* delta, const float* dout, const float* qkv, const float* out,
                        const float* lse, int B, int T, int C, int NH, Backend& be);

}  // namespace conductor::model
