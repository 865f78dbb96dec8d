#pragma once
// Matrix products of the linear layers, with their bias add and bias gradient fused in (llm.c's matmul_*).
// Every model kernel (this file, encoder.hpp, layernorm.hpp, attention.hpp, gelu.hpp, crossentropy.hpp,
// adamw.hpp) is declared once, llm.c style: outputs first, inputs next, shapes last, and last of all the backend
// to run on (where llm.c's CUDA kernels take their stream). The call runs that backend's implementation
// (cpu_kernels.cpp or cuda/kernels.cu); both implement exactly this signature (kernel_table.hpp checks it).
// Tensors are contiguous, row-major, in the backend's memory; "+=" marks outputs that are accumulated into.
#include <cstddef>

namespace conductor::model {

class Backend;

// How a weight matrix is stored. out_in is nn.Linear's [out, in] order, (OC,C). in_out is (C,OC): used where a
// range of input channels (a head group or a block of MLP columns) must be a contiguous row block (block.hpp).
enum class WeightLayout { out_in, in_out };
// Whether a product overwrites its output or adds into it (slices of a layer add their shares to one output).
enum class Accumulate { no, yes };

// out (+)= inp @ W + bias, with W = weight^T (out_in) or weight (in_out)
// out: (B,T,OC), inp: (B,T,C), weight: (OC,C) out_in or (C,OC) in_out, bias: (OC) or nullptr
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C, int OC,
                    WeightLayout layout, Accumulate acc, Backend& be);
// dinp (+)= dout @ W^T
// dinp: (B,T,C), dout: (B,T,OC), weight: as in matmul_forward
void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                           WeightLayout layout, Accumulate acc, Backend& be);
// dweight += d(loss)/d(weight), dbias += column sums of dout (skipped when dbias is nullptr)
// dweight: as weight in matmul_forward, dbias: (OC) or nullptr, dout: (B,T,OC), inp: (B,T,C)
void matmul_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, int B, int T, int C,
                            int OC, WeightLayout layout, Backend& be);

}  // namespace conductor::model
