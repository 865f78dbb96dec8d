#pragma once
// The CUDA backend: the Backend interface (backend.hpp) on device memory of one GPU. GEMMs go through cuBLAS
// (fp32; optionally TF32 tensor cores; or bf16 operands with fp32 accumulation and fp32 storage), everything
// else through our own kernels (kernels.cu). All work is queued on one stream in call order; no call blocks the
// host except download(), sum_squares() (both return host values) and synchronize().
// Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <memory>
#include <string>

#include "conductor/model/backend.hpp"

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

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override;
  int device() const { return device_; }
  // The stream every kernel of this backend runs on; transports order their copies after it with events.
  cudaStream_t stream() const { return stream_; }
  const CudaOptions& options() const { return options_; }
  // Queues `ns` nanoseconds of GPU-side delay on the stream (the runtime's injected noise).
  void delay(long long ns);

  void* alloc(std::size_t bytes) override;
  void release(void* ptr) override;
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  void copy(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void synchronize() override;

  void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b, float alpha,
            float beta) override;
  void bias_forward(float* out, const float* bias, int N, int OC) override;
  void bias_backward(float* dbias, const float* dout, int N, int OC) override;
  void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) override;
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) override;
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                         int B, int T, int C) override;
  void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                const float* mean, const float* rstd, int B, int T, int C) override;
  void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                                 const float* rstd, int B, int T, int C) override;
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) override;
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                          int NH, int HS) override;
  void gelu_forward(float* out, const float* inp, std::size_t N) override;
  void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N) override;
  void residual_forward(float* out, const float* a, const float* b, std::size_t N) override;
  void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T,
                            int V) override;
  void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B, int T,
                             int V) override;
  void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float grad_scale, int t) override;
  double sum_squares(const float* x, std::size_t N) override;
  void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count) override;

 private:
  // Row-major C[m,n] = alpha op(A) op(B) + beta C with explicit leading dimensions and a batch of `batch`
  // products separated by the given strides (elements). fp32/TF32 only (the strided operands of attention).
  void sgemm_strided(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b, int lda,
                     int ldb, int ldc, long long stride_a, long long stride_b, long long stride_c, int batch,
                     float alpha, float beta);

  CudaOptions options_;
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  Scratch scratch_a_, scratch_b_;  // bf16 operand copies; column-reduction partials
  Scratch reduce_;                 // sum_squares partials
  double* host_result_ = nullptr;  // pinned, for sum_squares
};

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options = {});

}  // namespace conductor::model::cuda
