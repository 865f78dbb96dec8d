// A transformer layer as head / column slices (see block.hpp for the layout and the summing contract).
#include "conductor/model/block.hpp"

#include "conductor/model/attention.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/model/matmul.hpp"

namespace conductor::model {

namespace {
// Weight blocks of a head range / column range (contiguous by construction of the layout), in a parameter or a
// gradient buffer.
struct AttnBlock {
  float* qkv_w;
  float* qkv_b;
  float* proj_w;
  int ng, n3;  // heads, fused qkv width 3*ng*HS
  int ny;      // ng*HS
};
AttnBlock attn_block(const LayerView& w, const Dims& d, int h0, int h1) {
  const long row0 = 3L * h0 * d.HS;
  return {w.qkv_w + row0 * d.C, w.qkv_b + row0,  w.proj_w + static_cast<long>(h0) * d.HS * d.C, h1 - h0,
          3 * (h1 - h0) * d.HS, (h1 - h0) * d.HS};
}
struct MlpBlock {
  float* fc_w;
  float* fc_b;
  float* fcproj_w;
  int nc;  // hidden columns
};
MlpBlock mlp_block(const LayerView& w, const Dims& d, int c0, int c1) {
  return {w.fc_w + static_cast<long>(c0) * d.C, w.fc_b + c0, w.fcproj_w + static_cast<long>(c0) * d.C, c1 - c0};
}
}  // namespace

// The output projections are stored in_out ((C_in, C_out), block.hpp), the input projections out_in; a slice's
// output-projection bias is added / reduced by one slice only (holds_output_bias).
void attention_slice_forward(Backend& be, float* out, const AttnSliceBuffers& buf, const float* ln, const LayerView& w,
                             const Dims& d, int h0, int h1) {
  const AttnBlock s = attn_block(w, d, h0, h1);
  const float* proj_b = holds_output_bias(h0, h1) ? w.proj_b : nullptr;
  matmul_forward(buf.qkv, ln, s.qkv_w, s.qkv_b, d.B, d.T, d.C, s.n3, WeightLayout::out_in, Accumulate::no, be);
  attention_forward(buf.y, buf.lse, buf.qkv, d.B, d.T, s.ny, s.ng, be);
  matmul_forward(out, buf.y, s.proj_w, proj_b, d.B, d.T, s.ny, d.C, WeightLayout::in_out, Accumulate::yes, be);
}

void attention_slice_backward_input(Backend& be, float* dln, const AttnSliceBuffers& buf, const float* dout,
                                    const LayerView& w, const Dims& d, int h0, int h1) {
  const AttnBlock s = attn_block(w, d, h0, h1);
  matmul_backward_input(buf.dy, dout, s.proj_w, d.B, d.T, s.ny, d.C, WeightLayout::in_out, Accumulate::no, be);
  attention_backward(buf.dqkv, buf.delta, buf.dy, buf.qkv, buf.y, buf.lse, d.B, d.T, s.ny, s.ng, be);
  matmul_backward_input(dln, buf.dqkv, s.qkv_w, d.B, d.T, d.C, s.n3, WeightLayout::out_in, Accumulate::yes, be);
}

HeadGroupGrads head_group_grads(const LayerView& g, const Dims& d, int h0, int h1) {
  const AttnBlock s = attn_block(g, d, h0, h1);
  return {s.qkv_w, s.qkv_b, s.proj_w, holds_output_bias(h0, h1) ? g.proj_b : nullptr};
}

void head_group_backward_weight(Backend& be, const HeadGroupGrads& g, const AttnSliceBuffers& buf, const float* ln,
                                const float* dout, const Dims& d, int ng) {
  const int ny = ng * d.HS;
  matmul_backward_weight(g.qkv_w, g.qkv_b, buf.dqkv, ln, d.B, d.T, d.C, 3 * ny, WeightLayout::out_in, be);
  matmul_backward_weight(g.proj_w, g.proj_b, dout, buf.y, d.B, d.T, ny, d.C, WeightLayout::in_out, be);
}

void attention_slice_backward_weight(Backend& be, const LayerView& g, const AttnSliceBuffers& buf, const float* ln,
                                     const float* dout, const Dims& d, int h0, int h1) {
  head_group_backward_weight(be, head_group_grads(g, d, h0, h1), buf, ln, dout, d, h1 - h0);  // the gradient's blocks
}

void mlp_slice_forward(Backend& be, float* out, const MlpSliceBuffers& buf, const float* ln, const LayerView& w,
                       const Dims& d, int c0, int c1) {
  const MlpBlock s = mlp_block(w, d, c0, c1);
  const float* fcproj_b = holds_output_bias(c0, c1) ? w.fcproj_b : nullptr;
  matmul_forward(buf.h, ln, s.fc_w, s.fc_b, d.B, d.T, d.C, s.nc, WeightLayout::out_in, Accumulate::no, be);
  gelu_forward(buf.gelu, buf.h, static_cast<std::size_t>(d.BT()) * s.nc, be);
  matmul_forward(out, buf.gelu, s.fcproj_w, fcproj_b, d.B, d.T, s.nc, d.C, WeightLayout::in_out, Accumulate::yes, be);
}

void mlp_slice_backward_input(Backend& be, float* dln, const MlpSliceBuffers& buf, const float* dout,
                              const LayerView& w, const Dims& d, int c0, int c1) {
  const MlpBlock s = mlp_block(w, d, c0, c1);
  matmul_backward_input(buf.dh, dout, s.fcproj_w, d.B, d.T, s.nc, d.C, WeightLayout::in_out, Accumulate::no, be);
  gelu_backward(buf.dh, buf.dh, buf.h, static_cast<std::size_t>(d.BT()) * s.nc, be);
  matmul_backward_input(dln, buf.dh, s.fc_w, d.B, d.T, d.C, s.nc, WeightLayout::out_in, Accumulate::yes, be);
}

MlpGroupGrads mlp_group_grads(const LayerView& g, const Dims& d, int c0, int c1) {
  const MlpBlock s = mlp_block(g, d, c0, c1);
  return {s.fc_w, s.fc_b, s.fcproj_w, holds_output_bias(c0, c1) ? g.fcproj_b : nullptr};
}

void mlp_group_backward_weight(Backend& be, const MlpGroupGrads& g, const MlpSliceBuffers& buf, const float* ln,
                               const float* dout, const Dims& d, int nc) {
  matmul_backward_weight(g.fc_w, g.fc_b, buf.dh, ln, d.B, d.T, d.C, nc, WeightLayout::out_in, be);
  matmul_backward_weight(g.fcproj_w, g.fcproj_b, dout, buf.gelu, d.B, d.T, nc, d.C, WeightLayout::in_out, be);
}

void mlp_slice_backward_weight(Backend& be, const LayerView& g, const MlpSliceBuffers& buf, const float* ln,
                               const float* dout, const Dims& d, int c0, int c1) {
  mlp_group_backward_weight(be, mlp_group_grads(g, d, c0, c1), buf, ln, dout, d, c1 - c0);
}

void layer_forward(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  layer_forward_before_mlp(be, a, w, d);
  layer_forward_mlp(be, a, w, d);
}

void layer_forward_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  be.copy(a.out, a.x2, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float));
  mlp_slice_forward(be, a.out, a.mlp, a.ln2, w, d, 0, d.F);
}

void layer_forward_before_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  layernorm_forward(a.ln1, a.mean1, a.rstd1, a.x, w.ln1_w, w.ln1_b, d.B, d.T, d.C, be);
  be.copy(a.x2, a.x, btc * sizeof(float));
  attention_slice_forward(be, a.x2, a.attn, a.ln1, w, d, 0, d.NH);
  layernorm_forward(a.ln2, a.mean2, a.rstd2, a.x2, w.ln2_w, w.ln2_b, d.B, d.T, d.C, be);
}

void layer_backward_input(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  layer_backward_input_mlp(be, a, w, d);
  layer_backward_input_after_mlp(be, a, w, d);
}

void layer_backward_input_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  be.zero(a.dln2, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float));
  mlp_slice_backward_input(be, a.dln2, a.mlp, a.dout, w, d, 0, d.F);
}

void layer_backward_input_after_mlp(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  layer_backward_input_ln2(be, a, w, d);
  be.zero(a.dln1, btc * sizeof(float));
  attention_slice_backward_input(be, a.dln1, a.attn, a.dx2, w, d, 0, d.NH);
  layer_backward_input_ln1(be, a, w, d);
}

void layer_backward_input_ln2(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  be.copy(a.dx2, a.dout, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float));  // residual path
  layernorm_backward_input(a.dx2, a.dln2, a.x2, w.ln2_w, a.mean2, a.rstd2, d.B, d.T, d.C, be);
}

void layer_backward_input_ln1(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  be.copy(a.dx, a.dx2, static_cast<std::size_t>(d.BT()) * d.C * sizeof(float));
  layernorm_backward_input(a.dx, a.dln1, a.x, w.ln1_w, a.mean1, a.rstd1, d.B, d.T, d.C, be);
}

void layer_backward_weight(Backend& be, const LayerActs& a, const LayerView& g, const Dims& d) {
  mlp_slice_backward_weight(be, g, a.mlp, a.ln2, a.dout, d, 0, d.F);
  layernorm_backward_weight(g.ln2_w, g.ln2_b, a.dln2, a.x2, a.mean2, a.rstd2, d.B, d.T, d.C, be);
  attention_slice_backward_weight(be, g, a.attn, a.ln1, a.dx2, d, 0, d.NH);
  layernorm_backward_weight(g.ln1_w, g.ln1_b, a.dln1, a.x, a.mean1, a.rstd1, d.B, d.T, d.C, be);
}

void layer_backward_weight_norms(Backend& be, const LayerActs& a, const LayerView& g, const Dims& d) {
  layernorm_backward_weight(g.ln2_w, g.ln2_b, a.dln2, a.x2, a.mean2, a.rstd2, d.B, d.T, d.C, be);
  layernorm_backward_weight(g.ln1_w, g.ln1_b, a.dln1, a.x, a.mean1, a.rstd1, d.B, d.T, d.C, be);
}

}  // namespace conductor::model
