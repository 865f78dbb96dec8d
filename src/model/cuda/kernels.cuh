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

}  // namespace conductor::model::cuda
