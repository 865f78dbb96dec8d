#pragma once
// Error checks for CUDA, cuBLAS and NCCL calls: a failing call throws conductor::Error naming the call, the
// library's own error text, and the file and line, so a failure on a cluster rank is diagnosable from its log.
// Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace conductor::model::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);
// NCCL status as an int, so this header does not need nccl.h.
[[noreturn]] void throw_nccl_error(int result, const char* nccl_text, const char* call, const char* file, int line);

}  // namespace conductor::model::cuda

#define cudaCheck(call)                                                                      \
  do {                                                                                       \
    const cudaError_t conductor_err_ = (call);                                               \
    if (conductor_err_ != cudaSuccess)                                                       \
      ::conductor::model::cuda::throw_cuda_error(conductor_err_, #call, __FILE__, __LINE__); \
  } while (0)

#define cublasCheck(call)                                                                     \
  do {                                                                                        \
    const cublasStatus_t conductor_st_ = (call);                                              \
    if (conductor_st_ != CUBLAS_STATUS_SUCCESS)                                               \
      ::conductor::model::cuda::throw_cublas_error(conductor_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Requires <nccl.h> at the point of use.
#define ncclCheck(call)                                                                                              \
  do {                                                                                                               \
    const ncclResult_t conductor_nr_ = (call);                                                                       \
    if (conductor_nr_ != ncclSuccess)                                                                                \
      ::conductor::model::cuda::throw_nccl_error(static_cast<int>(conductor_nr_), ncclGetErrorString(conductor_nr_), \
                                                 #call, __FILE__, __LINE__);                                         \
  } while (0)

// After a kernel launch: launch-configuration errors are reported here; faults inside the kernel surface at
// the next synchronising call (they are asynchronous), which is also checked.
#define cudaCheckLaunch() cudaCheck(cudaGetLastError())
