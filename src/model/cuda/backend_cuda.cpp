// The CUDA backend: device memory from the stream-ordered allocator, one stream, one cuBLAS handle; the kernels
// are in kernels.cu. See cuda_backend.hpp.
#include <cstdint>
#include <limits>
#include <string>

#include "conductor/model/cuda/check.hpp"
#include "conductor/model/cuda/cuda_backend.hpp"
#include "conductor/util/error.hpp"
#include "kernels.cuh"

namespace conductor::model::cuda {

// ------------------------------------------------------------------------------------------------ errors
void throw_cuda_error(cudaError_t err, const char* call, const char* file, int line) {
  throw Error(std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in " + call +
              " at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(std::string("cuBLAS error ") + cublas().status_name(status) + " (" + cublas().status_string(status) +
              ") in " + call + " at " + file + ":" + std::to_string(line));
}

void throw_nccl_error(int result, const char* nccl_text, const char* call, const char* file, int line) {
  throw Error("NCCL error " + std::to_string(result) + " (" + nccl_text + ") in " + call + " at " + file + ":" +
              std::to_string(line));
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "bf16") return Precision::bf16;
  throw InputError("model.precision: '" + name + "' is not a precision (allowed: fp32, bf16)");
}

// ------------------------------------------------------------------------------------------------ scratch
Scratch::~Scratch() { reset(); }

void Scratch::reset() {
  if (ptr_) cudaFreeAsync(ptr_, stream_);  // no throw here (destructors); errors surface at the next check
  ptr_ = nullptr;
  bytes_ = 0;
}

void* Scratch::get(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= bytes_ && stream == stream_) return ptr_;
  if (ptr_) cudaCheck(cudaFreeAsync(ptr_, stream_));  // ordered after every queued use of the old area
  ptr_ = nullptr;
  bytes_ = 0;
  // Grow by 1.5x so a sequence of slightly larger requests does not reallocate each time.
  const std::size_t want = bytes + bytes / 2;
  cudaCheck(cudaMallocAsync(&ptr_, want, stream));
  bytes_ = want;
  stream_ = stream;
  return ptr_;
}

// ------------------------------------------------------------------------------------------------ backend
CudaBackend::CudaBackend(const CudaOptions& options) : Backend(kernel_table()), options_(options) {
  cx_.blas = &cublas();  // first: a missing cuBLAS is said before any device resource is made
  if (options_.device >= 0) cudaCheck(cudaSetDevice(options_.device));
  cudaCheck(cudaGetDevice(&device_));
  // Keep freed pool memory in the process (default threshold 0 returns it to the driver at every
  // synchronisation, which would make each step re-map its activations).
  cudaMemPool_t pool;
  cudaCheck(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  cudaCheck(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cudaCheck(cudaStreamCreateWithFlags(&cx_.stream, cudaStreamNonBlocking));
  cx_.precision = options_.precision;
  cublasCheck(cx_.blas->create(&cx_.cublas));
  cublasCheck(cx_.blas->set_stream(cx_.cublas, cx_.stream));
  // fp32 reference results need exact fp32 products; TF32 is opt-in (and used by bf16 for attention's products).
  const bool tf32 = options_.tf32 || options_.precision == Precision::bf16;
  cublasCheck(cx_.blas->set_math_mode(cx_.cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  cudaCheck(cudaMallocHost(&cx_.host_result, sizeof(double)));
}

CudaBackend::~CudaBackend() {
  // Best effort: nothing here may throw. Queued work finishes before the stream is destroyed.
  if (cx_.stream) cudaStreamSynchronize(cx_.stream);
  if (cx_.host_result) cudaFreeHost(cx_.host_result);
  if (cx_.cublas) cx_.blas->destroy(cx_.cublas);
  // The scratch areas are freed on the stream, so before the stream goes.
  cx_.operand_a.reset();
  cx_.operand_b.reset();
  cx_.reduce.reset();
  if (cx_.stream) {
    cudaStreamSynchronize(cx_.stream);
    cudaStreamDestroy(cx_.stream);
  }
}

std::string CudaBackend::name() const { return "cuda"; }

void* CudaBackend::alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, cx_.stream);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state of an out-of-memory
    std::size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    throw Error("cuda backend: cannot allocate " + std::to_string(bytes) + " bytes on device " +
                std::to_string(device_) + " (" + cudaGetErrorString(err) + "; " + std::to_string(free_bytes >> 20) +
                " MiB free of " + std::to_string(total >> 20) + " MiB)");
  }
  return p;  // the pool's allocations are 256-byte aligned
}

void CudaBackend::release(void* ptr) {
  if (ptr) cudaCheck(cudaFreeAsync(ptr, cx_.stream));
}

void CudaBackend::upload(void* dst, const void* host_src, std::size_t bytes) {
  // From pageable memory the call returns once the source is staged, so the caller may reuse it at once.
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cx_.stream));
}

void CudaBackend::download(void* host_dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  cudaCheck(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cx_.stream));
  cudaCheck(cudaStreamSynchronize(cx_.stream));  // the caller reads host_dst on return
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cx_.stream));
}

void CudaBackend::zero(void* dst, std::size_t bytes) {
  if (bytes) cudaCheck(cudaMemsetAsync(dst, 0, bytes, cx_.stream));
}

void CudaBackend::synchronize() { cudaCheck(cudaStreamSynchronize(cx_.stream)); }

void CudaBackend::delay(long long ns) { launch_delay(ns, cx_.stream); }

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace conductor::model::cuda
