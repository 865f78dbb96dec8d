// A transformer layer as head / column slices (see block.hpp for the layout and the summing contract).
#include "conductor/model/block.hpp"

namespace conductor::model {

namespace {
// Weight blocks of a head range / column range (contiguous by construction of the layout).
struct AttnBlock {
  const float* qkv_w;
  const float* qkv_b;
  const float* proj_w;
  int ng, n3;  // heads, fused qkv width 3*ng*HS
  int ny;      // ng*HS
};
AttnBlock attn_block(const LayerView& w, const Dims& d, int h0, int h1) {
  const long row0 = 3L * h0 * d.HS;
  return {w.qkv_w + row0 * d.C, w.qkv_b + row0,  w.proj_w + static_cast<long>(h0) * d.HS * d.C, h1 - h0,
          3 * (h1 - h0) * d.HS, (h1 - h0) * d.HS};
}
}  // namespace

void attention_slice_forward(Backend& be, float* out, const AttnSliceBuffers& buf, const float* ln, const LayerView& w,
                             const Dims& d, int h0, int h1) {
  const AttnBlock s = attn_block(w, d, h0, h1);
  const int N = static_cast<int>(d.BT());
  be.gemm(buf.qkv, ln, s.qkv_w, N, s.n3, d.C, false, true, 1.0f, 0.0f);  // [N,n3] = ln [N,C] @ W^T
  be.bias_forward(buf.qkv, s.qkv_b, N, s.n3);
  be.attention_forward(buf.y, buf.att, buf.qkv, d.B, d.T, s.ng, d.HS);
  be.gemm(out, buf.y, s.proj_w, N, d.C, s.ny, false, false, 1.0f, 1.0f);  // out += y [N,ny] @ Wp [ny,C]
  if (h0 == 0) be.bias_forward(out, w.proj_b, N, d.C);
}

void attention_slice_backward_input(Backend& be, float* dln, const AttnSliceBuffers& buf, const float* dout,
                                    const LayerView& w, const Dims& d, int h0, int h1) {
  const AttnBlock s = attn_block(w, d, h0, h1);
  const int N = static_cast<int>(d.BT());
  be.gemm(buf.dy, dout, s.proj_w, N, s.ny, d.C, false, true, 1.0f, 0.0f);  // dy = dout @ Wp^T
  be.attention_backward(buf.dqkv, buf.datt, buf.dy, buf.qkv, buf.att, d.B, d.T, s.ng, d.HS);
  be.gemm(dln, buf.dqkv, s.qkv_w, N, d.C, s.n3, false, false, 1.0f, 1.0f);  // dln += dqkv @ Wqkv
}

void attention_slice_backward_weight(Backend& be, const LayerView& g, const AttnSliceBuffers& buf, const float* ln,
                                     const float* dout, const Dims& d, int h0, int h1) {
  const long row0 = 3L * h0 * d.HS;
  const int n3 = 3 * (h1 - h0) * d.HS, ny = (h1 - h0) * d.HS;
  const int N = static_cast<int>(d.BT());
  be.gemm(g.qkv_w + row0 * d.C, buf.dqkv, ln, n3, d.C, N, true, false, 1.0f, 1.0f);  // += dqkv^T @ ln
  be.bias_backward(g.qkv_b + row0, buf.dqkv, N, n3);
  be.gemm(g.proj_w + static_cast<long>(h0) * d.HS * d.C, buf.y, dout, ny, d.C, N, true, false, 1.0f, 1.0f);
  if (h0 == 0) be.bias_backward(g.proj_b, dout, N, d.C);
}

void mlp_slice_forward(Backend& be, float* out, const MlpSliceBuffers& buf, const float* ln, const LayerView& w,
                       const Dims& d, int c0, int c1) {
  const int nc = c1 - c0, N = static_cast<int>(d.BT());
  be.gemm(buf.h, ln, w.fc_w + static_cast<long>(c0) * d.C, N, nc, d.C, false, true, 1.0f, 0.0f);
  be.bias_forward(buf.h, w.fc_b + c0, N, nc);
  be.gelu_forward(buf.gelu, buf.h, static_cast<std::size_t>(N) * nc);
  be.gemm(out, buf.gelu, w.fcproj_w + static_cast<long>(c0) * d.C, N, d.C, nc, false, false, 1.0f, 1.0f);
  if (c0 == 0) be.bias_forward(out, w.fcproj_b, N, d.C);
}

void mlp_slice_backward_input(Backend& be, float* dln, const MlpSliceBuffers& buf, const float* dout,
                              const LayerView& w, const Dims& d, int c0, int c1) {
  const int nc = c1 - c0, N = static_cast<int>(d.BT());
  be.gemm(buf.dh, dout, w.fcproj_w + static_cast<long>(c0) * d.C, N, nc, d.C, false, true, 1.0f, 0.0f);
  be.gelu_backward(buf.dh, buf.dh, buf.h, static_cast<std::size_t>(N) * nc);
  be.gemm(dln, buf.dh, w.fc_w + static_cast<long>(c0) * d.C, N, d.C, nc, false, false, 1.0f, 1.0f);
}

void mlp_slice_backward_weight(Backend& be, const LayerView& g, const MlpSliceBuffers& buf, const float* ln,
                               const float* dout, const Dims& d, int c0, int c1) {
  const int nc = c1 - c0, N = static_cast<int>(d.BT());
  be.gemm(g.fc_w + static_cast<long>(c0) * d.C, buf.dh, ln, nc, d.C, N, true, false, 1.0f, 1.0f);
  be.bias_backward(g.fc_b + c0, buf.dh, N, nc);
  be.gemm(g.fcproj_w + static_cast<long>(c0) * d.C, buf.gelu, dout, nc, d.C, N, true, false, 1.0f, 1.0f);
  if (c0 == 0) be.bias_backward(g.fcproj_b, dout, N, d.C);
}

void layer_forward(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  be.layernorm_forward(a.ln1, a.mean1, a.rstd1, a.x, w.ln1_w, w.ln1_b, d.B, d.T, d.C);
  be.copy(a.x2, a.x, btc * sizeof(float));
  attention_slice_forward(be, a.x2, a.attn, a.ln1, w, d, 0, d.NH);
  be.layernorm_forward(a.ln2, a.mean2, a.rstd2, a.x2, w.ln2_w, w.ln2_b, d.B, d.T, d.C);
  be.copy(a.out, a.x2, btc * sizeof(float));
  mlp_slice_forward(be, a.out, a.mlp, a.ln2, w, d, 0, d.F);
}

void layer_backward_input(Backend& be, const LayerActs& a, const LayerView& w, const Dims& d) {
  const std::size_t btc = static_cast<std::size_t>(d.BT()) * d.C;
  be.zero(a.dln2, btc * sizeof(float));
  mlp_slice_backward_input(be, a.dln2, a.mlp, a.dout, w, d, 0, d.F);
  be.copy(a.dx2, a.dout, btc * sizeof(float));  // residual path
  be.layernorm_backward_input(a.dx2, a.dln2, a.x2, w.ln2_w, a.mean2, a.rstd2, d.B, d.T, d.C);
  be.zero(a.dln1, btc * sizeof(float));
  attention_slice_backward_input(be, a.dln1, a.attn, a.dx2, w, d, 0, d.NH);
  be.copy(a.dx, a.dx2, btc * sizeof(float));
  be.layernorm_backward_input(a.dx, a.dln1, a.x, w.ln1_w, a.mean1, a.rstd1, d.B, d.T, d.C);
}

void layer_backward_weight(Backend& be, const LayerActs& a, const LayerView& g, const Dims& d) {
  mlp_slice_backward_weight(be, g, a.mlp, a.ln2, a.dout, d, 0, d.F);
  be.layernorm_backward_weight(g.ln2_w, g.ln2_b, a.dln2, a.x2, a.mean2, a.rstd2, d.B, d.T, d.C);
  attention_slice_backward_weight(be, g, a.attn, a.ln1, a.dx2, d, 0, d.NH);
  be.layernorm_backward_weight(g.ln1_w, g.ln1_b, a.dln1, a.x, a.mean1, a.rstd1, d.B, d.T, d.C);
}

}  // namespace conductor::model
