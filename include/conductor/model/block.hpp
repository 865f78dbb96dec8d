#pragma once
// One transformer layer, written as slices. A slice of attention is a contiguous head range [h0, h1); a slice of
// the MLP is a contiguous hidden-column range [c0, c1). Each slice is a pure function of (LayerNorm output,
// its weight block); a slice's forward ADDS its share of the branch output into `out`, its backward_input ADDS
// its share of the gradient for the LayerNorm output into `dln`, and its backward_weight accumulates the
// gradients of its own weight block only. Summing the slices therefore gives the whole layer, and the full
// layer is the one slice covering every head / column (the trainer runs exactly that). The output-projection
// bias belongs to the slice that starts at head 0 / column 0.
//
// Weight layout (per layer), chosen so that every slice's weights are contiguous blocks:
//   qkv_w    [NH, 3, HS, C]  Megatron-style: q, k, v rows of head h together (nn.Linear [out, in] order)
//   qkv_b    [NH, 3, HS]
//   proj_w   [C_in = NH*HS, C_out = C]   input-major, so a head range is a row block
//   proj_b   [C]
//   fc_w     [F, C]          nn.Linear [out, in]
//   fc_b     [F]
//   fcproj_w [F, C]          input-major ([in, out]) for the same reason as proj_w
//   fcproj_b [C]
#include "conductor/model/backend.hpp"

namespace conductor::model {

struct Dims {
  int B = 1;   // sequences per microbatch
  int T = 1;   // sequence length
  int C = 1;   // d_model
  int NH = 1;  // heads
  int HS = 1;  // head size C / NH
  int F = 1;   // MLP hidden width
  int V = 2;   // vocabulary
  long BT() const { return static_cast<long>(B) * T; }
};

// Pointers to one layer's tensors inside a parameter (or gradient) buffer.
struct LayerView {
  float* ln1_w = nullptr;
  float* ln1_b = nullptr;
  float* qkv_w = nullptr;
  float* qkv_b = nullptr;
  float* proj_w = nullptr;
  float* proj_b = nullptr;
  float* ln2_w = nullptr;
  float* ln2_b = nullptr;
  float* fc_w = nullptr;
  float* fc_b = nullptr;
  float* fcproj_w = nullptr;
  float* fcproj_b = nullptr;
};

// Buffers of one attention slice of ng = h1 - h0 heads, for one microbatch.
struct AttnSliceBuffers {
  float* qkv = nullptr;    // [B,T,ng,3,HS]  forward, kept for B and W
  float* lse = nullptr;    // [B,ng,T]       forward, kept for B (attention.hpp)
  float* y = nullptr;      // [B,T,ng*HS]    forward, kept for B and W
  float* dqkv = nullptr;   // [B,T,ng,3,HS]  written by B, kept for W
  float* dy = nullptr;     // [B,T,ng*HS]    scratch of B
  float* delta = nullptr;  // [B,ng,T]       scratch of B
};

// Buffers of one MLP slice of nc = c1 - c0 hidden columns, for one microbatch.
struct MlpSliceBuffers {
  float* h = nullptr;     // [B,T,nc]  pre-GELU, forward, kept for B
  float* gelu = nullptr;  // [B,T,nc]  forward, kept for W
  float* dh = nullptr;    // [B,T,nc]  written by B, kept for W
};

// Which slice of a unit adds (forward) and accumulates (weight gradient) the output projection's bias: the one
// that starts at head or column 0 and is not empty. An empty slice [0, 0) before it never takes it, so the bias
// is counted once however the groups are cut.
constexpr bool holds_output_bias(int lo, int hi) { return lo == 0 && hi > lo; }

// out [B,T,C] += slice output (incl. proj_b when holds_output_bias(h0, h1)); ln [B,T,C] is the LayerNorm output.
void attention_slice_forward(Backend& be, float* out, const AttnSliceBuffers& buf, const float* ln, const LayerView& w,
                             const Dims& d, int h0, int h1);
// dln [B,T,C] += slice's gradient for ln, given dout [B,T,C] (gradient of the branch output); keeps buf.dqkv.
void attention_slice_backward_input(Backend& be, float* dln, const AttnSliceBuffers& buf, const float* dout,
                                    const LayerView& w, const Dims& d, int h0, int h1);
// grads of the slice's block of qkv_w, qkv_b, proj_w (and proj_b when holds_output_bias(h0, h1)) +=
void attention_slice_backward_weight(Backend& be, const LayerView& g, const AttnSliceBuffers& buf, const float* ln,
                                     const float* dout, const Dims& d, int h0, int h1);

void mlp_slice_forward(Backend& be, float* out, const MlpSliceBuffers& buf, const float* ln, const LayerView& w,
                       const Dims& d, int c0, int c1);
void mlp_slice_backward_input(Backend& be, float* dln, const MlpSliceBuffers& buf, const float* dout,
                              const LayerView& w, const Dims& d, int c0, int c1);
void mlp_slice_backward_weight(Backend& be, const LayerView& g, const MlpSliceBuffers& buf, const float* ln,
                               const float* dout, const Dims& d, int c0, int c1);

// The weight-gradient blocks of one MLP column group of nc columns (contiguous by the layout above): what
// mlp_slice_backward_weight accumulates into. fcproj_b is nullptr unless the group starts at column 0. A helper
// rank of computation migration (runtime/compute.cpp) accumulates into zeroed blocks of its own with the same
// kernel, so its result is the owner's bit for bit.
struct MlpGroupGrads {
  float* fc_w = nullptr;      // [nc, C]
  float* fc_b = nullptr;      // [nc]
  float* fcproj_w = nullptr;  // [nc, C]
  float* fcproj_b = nullptr;  // [C] or nullptr
};
MlpGroupGrads mlp_group_grads(const LayerView& g, const Dims& d, int c0, int c1);
void mlp_group_backward_weight(Backend& be, const MlpGroupGrads& g, const MlpSliceBuffers& buf, const float* ln,
                               const float* dout, const Dims& d, int nc);

// The weight-gradient blocks of one attention head group of ng heads (contiguous by the layout above): what
// attention_slice_backward_weight accumulates into. proj_b is nullptr unless the group starts at head 0. As for the
// MLP groups, a helper rank accumulates into zeroed blocks of its own with the same kernel.
struct HeadGroupGrads {
  float* qkv_w = nullptr;   // [3 ng HS, C]
  float* qkv_b = nullptr;   // [3 ng HS]
  float* proj_w = nullptr;  // [ng HS, C]
  float* proj_b = nullptr;  // [C] or nullptr
};
HeadGroupGrads head_group_grads(const LayerView& g, const Dims& d, int h0, int h1);
// buf.dqkv [B,T,ng,3,HS] and buf.y [B,T,ng*HS] are the group's compact copies; dout is the attention output's
// gradient [B,T,C].
void head_group_backward_weight(Backend& be, const HeadGroupGrads& g, const AttnSliceBuffers& buf, const float* ln,
                                const float* dout, const Dims& d, int ng);

// Everything one full layer keeps for one microbatch (all heads, all columns as one slice each).
struct LayerActs {
  float* x = nullptr;      // [B,T,C] layer input (the residual stream)
  float* ln1 = nullptr;    // [B,T,C]
  float* mean1 = nullptr;  // [B,T]
  float* rstd1 = nullptr;  // [B,T]
  float* x2 = nullptr;     // [B,T,C] residual after attention
  float* ln2 = nullptr;    // [B,T,C]
  float* mean2 = nullptr;  // [B,T]
  float* rstd2 = nullptr;  // [B,T]
  float* out = nullptr;    // [B,T,C] layer output (= next layer's x)
  AttnSliceBuffers attn;
  MlpSliceBuffers mlp;
  // gradients written by B and kept for W
  float* dout = nullptr;  // [B,T,C] gradient of the layer output (input of B; = next layer's dx)
  float* dx2 = nullptr;   // [B,T,C]
  float* dln1 = nullptr;  // [B,T,C]
  float* dln2 = nullptr;  // [B,T,C]
  float* dx = nullptr;    // [B,T,C] gradient of the layer input (output of B)
};

void layer_forward(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_input(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_weight(Backend& be, const LayerActs& a, const LayerView& g, const Dims& d);
// The parts of a layer around its MLP, for a model that computes the MLP in column groups (model/stage.hpp,
// computation migration): layer_forward up to ln2, and layer_backward_input after dln2 (which the caller wrote).
void layer_forward_before_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_input_after_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
// Finer parts, for a model that computes the attention in head groups too: the ungrouped MLP of F (out = x2 +
// MLP(ln2)) and of B (dln2), B's LN2 part (dx2 from dout and dln2) and its LN1 part (dx from dx2 and dln1).
void layer_forward_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_input_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_input_ln2(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
void layer_backward_input_ln1(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d);
// layer_backward_weight's LayerNorm weight gradients only (the MLP and the attention computed group by group
// instead; the outputs are disjoint, so the order of the parts does not change a bit).
void layer_backward_weight_norms(Backend& be, const LayerActs& a, const LayerView& g, const Dims& d);

}  // namespace conductor::model
