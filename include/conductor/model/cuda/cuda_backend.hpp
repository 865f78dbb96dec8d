#pragma once
// The CUDA backend: the Backend interface (backend.hpp) on device memory of one GPU, with the CUDA
// implementations of the model kernels (kernels.cu): GEMMs through cuBLAS (fp32; optionally TF32 tensor cores;
// or bf16 operands with fp32 accumulation and fp32 storage), everything else through our own kernels. All work
// is queued on one stream in call order; nothing blocks the host except download(), sum_squares[_each]() (both
// return host values) and synchronize().
// Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "conductor/model/backend.hpp"
#include "conductor/model/cuda/cublas_library.hpp"

namespace conductor::model::cuda {

enum class Precision {
  fp32,  // fp32 everywhere (cuBLAS SGEMM without tensor cores unless tf32)
  bf16,  // GEMM operands rounded to bf16 on the fly, fp32 accumulation and fp32 outputs; fp32 master weights,
         // optimizer state and every non-GEMM kernel. Attention's batched products use TF32.
};

struct CudaOptions {
  int device = -1;  // CUDA device ordinal; -1 keeps the current device (select_device())
  Precision precision = Precision::fp32;
  bool tf32 = false;  // fp32 GEMMs on TF32 tensor cores (10-bit mantissa inputs)
};

Precision parse_precision(const std::string& name);  // "fp32" | "bf16", else InputError

// A growable device scratch area, freed stream-ordered (no host synchronisation when it grows).
class Scratch {
 public:
  Scratch() = default;
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get(std::size_t bytes, cudaStream_t stream);
  void reset();  // frees the area, ordered after the work queued on its stream

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
};

// What the CUDA kernels (kernels.cu) use of their backend: its stream, cuBLAS handle, precision and scratch.
struct CudaContext {
  cudaStream_t stream = nullptr;
  const CublasApi* blas = nullptr;  // cuBLAS, opened with the first backend (cublas_library.hpp)
  cublasHandle_t cublas = nullptr;
  Precision precision = Precision::fp32;
  Scratch operand_a, operand_b;   // bf16 copies of GEMM operands
  Scratch reduce;                 // partial sums of column reductions and sum_squares
  double* host_result = nullptr;  // pinned, for sum_squares
};

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  int device() const { return device_; }
  // The stream every kernel of this backend runs on; transports order their copies after it with events.
  cudaStream_t stream() const { return cx_.stream; }
  const CudaOptions& options() const { return options_; }
  // Queues `ns` nanoseconds of GPU-side delay on the stream (the runtime's injected noise).
  void delay(long long ns);
  CudaContext& context() { return cx_; }

  void* alloc(std::size_t bytes) override;
  void release(void* ptr) override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void synchronize() override;

 private:
  CudaOptions options_;
  int device_ = 0;
  CudaContext cx_;
};

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});

}  // namespace conductor::model::cuda
