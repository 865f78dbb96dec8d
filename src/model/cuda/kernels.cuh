#pragma once
// What the CUDA backend (backend_cuda.cpp) needs of kernels.cu. Private to the CUDA backend.
#include <cuda_runtime.h>

#include "../kernel_table.hpp"

namespace conductor::model::cuda {

// The CUDA implementations of the model kernels (kernels.cu), for CudaBackend's constructor.
const KernelTable& kernel_table();

// Occupies the stream for `ns` nanoseconds of GPU time (one thread polling %globaltimer): the noise model's
// injected delay, on the device so it delays exactly the ops queued behind it.
void launch_delay(long long ns, cudaStream_t s);

// The bf16 tensor-core attention (attention_mma.cu), the path of `model.precision: bf16` for the head sizes it
// serves (16, 32, 64, 128); the fp32 kernels of kernels.cu serve the rest. Same layouts as attention.hpp's; the
// backward takes delta (dout . out per row) already computed.
bool mma_attention_supported(int HS);
void mma_attention_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int HS, float scale,
                           cudaStream_t s);
void mma_attention_backward(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* delta,
                            int B, int T, int NH, int HS, float scale, cudaStream_t s);

}  // namespace conductor::model::cuda
