// The CUDA backend: device memory from the stream-ordered allocator, cuBLAS for every product, our kernels
// (kernels.cu) for the rest, all on one stream. See cuda_backend.hpp.
#include <cmath>
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
  throw Error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) +
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
CudaBackend::CudaBackend(const CudaOptions& options) : options_(options) {
  if (options_.device >= 0) cudaCheck(cudaSetDevice(options_.device));
  cudaCheck(cudaGetDevice(&device_));
  // Keep freed pool memory in the process (default threshold 0 returns it to the driver at every
  // synchronisation, which would make each step re-map its activations).
  cudaMemPool_t pool;
  cudaCheck(cudaDeviceGetDefaultMemPool(&pool, device_));
  std::uint64_t threshold = std::numeric_limits<std::uint64_t>::max();
  cudaCheck(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  cudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublasCheck(cublasCreate(&cublas_));
  cublasCheck(cublasSetStream(cublas_, stream_));
  // fp32 reference results need exact fp32 products; TF32 is opt-in (and used by bf16 for attention's products).
  const bool tf32 = options_.tf32 || options_.precision == Precision::bf16;
  cublasCheck(cublasSetMathMode(cublas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  cudaCheck(cudaMallocHost(&host_result_, sizeof(double)));
}

CudaBackend::~CudaBackend() {
  // Best effort: nothing here may throw. Queued work finishes before the stream is destroyed.
  if (stream_) cudaStreamSynchronize(stream_);
  if (host_result_) cudaFreeHost(host_result_);
  if (cublas_) cublasDestroy(cublas_);
  // The scratch areas are freed on the stream, so before the stream goes.
  scratch_a_.reset();
  scratch_b_.reset();
  reduce_.reset();
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

std::string CudaBackend::name() const { return "cuda"; }

void* CudaBackend::alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMallocAsync(&p, bytes == 0 ? 256 : bytes, stream_);
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
  if (ptr) cudaCheck(cudaFreeAsync(ptr, stream_));
}

void CudaBackend::upload(void* dst, const void* host_src, std::size_t bytes) {
  // From pageable memory the call returns once the source is staged, so the caller may reuse it at once.
  if (bytes) cudaCheck(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
}

void CudaBackend::download(void* host_dst, const void* src, std::size_t bytes) {
  if (!bytes) return;
  cudaCheck(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  cudaCheck(cudaStreamSynchronize(stream_));  // the caller reads host_dst on return
}

void CudaBackend::copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes && dst != src) cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
}

void CudaBackend::zero(void* dst, std::size_t bytes) {
  if (bytes) cudaCheck(cudaMemsetAsync(dst, 0, bytes, stream_));
}

void CudaBackend::synchronize() { cudaCheck(cudaStreamSynchronize(stream_)); }

// ------------------------------------------------------------------------------------------------ dense
// Row-major C = A B is column-major C^T = B^T A^T: swap the operands and the m/n roles; a stored row-major
// matrix read column-major is its transpose, so each operand keeps its own transpose flag.
void CudaBackend::sgemm_strided(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a,
                                bool trans_b, int lda, int ldb, int ldc, long long stride_a, long long stride_b,
                                long long stride_c, int batch, float alpha, float beta) {
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batch == 1) {
    cublasCheck(cublasSgemm(cublas_, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc));
  } else {
    cublasCheck(cublasSgemmStridedBatched(cublas_, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a,
                                          &beta, c, ldc, stride_c, batch));
  }
}

void CudaBackend::gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b,
                       float alpha, float beta) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // c = beta * c, as the CPU kernel
    kernels::scale(c, beta, static_cast<std::size_t>(m) * n, stream_);
    return;
  }
  const int lda = trans_a ? m : k, ldb = trans_b ? k : n, ldc = n;
  if (options_.precision == Precision::fp32) {
    sgemm_strided(c, a, b, m, n, k, trans_a, trans_b, lda, ldb, ldc, 0, 0, 0, 1, alpha, beta);
    return;
  }
  // bf16: operands rounded to bf16 (tensor cores), products accumulated in fp32 and written to fp32 C.
  const std::size_t na = static_cast<std::size_t>(m) * k, nb = static_cast<std::size_t>(k) * n;
  void* a16 = scratch_a_.get(na * 2, stream_);
  void* b16 = scratch_b_.get(nb * 2, stream_);
  kernels::to_bf16(a16, a, na, stream_);
  kernels::to_bf16(b16, b, nb, stream_);
  cublasCheck(cublasGemmEx(cublas_, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k,
                           &alpha, b16, CUDA_R_16BF, ldb, a16, CUDA_R_16BF, lda, &beta, c, CUDA_R_32F, ldc,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CudaBackend::bias_forward(float* out, const float* bias, int N, int OC) {
  kernels::bias_forward(out, bias, N, OC, stream_);
}

void CudaBackend::bias_backward(float* dbias, const float* dout, int N, int OC) {
  const std::size_t floats = static_cast<std::size_t>(kernels::column_chunks(N)) * OC;
  auto* partial = static_cast<float*>(reduce_.get(floats * sizeof(float), stream_));
  kernels::bias_backward(dbias, dout, N, OC, partial, stream_);
}

// ------------------------------------------------------------------------------------------------ embedding
void CudaBackend::encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                                  int C) {
  kernels::encoder_forward(out, tokens, wte, wpe, B, T, C, stream_);
}

void CudaBackend::encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                   int C) {
  kernels::encoder_backward(dwte, dwpe, dout, tokens, B, T, C, stream_);
}

// ------------------------------------------------------------------------------------------------ layernorm
void CudaBackend::layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                    const float* bias, int B, int T, int C) {
  kernels::layernorm_forward(out, mean, rstd, inp, weight, bias, B * T, C, stream_);
}

void CudaBackend::layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                           const float* mean, const float* rstd, int B, int T, int C) {
  kernels::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, B * T, C, stream_);
}

void CudaBackend::layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                                            const float* mean, const float* rstd, int B, int T, int C) {
  const int N = B * T;
  const std::size_t floats = 2 * static_cast<std::size_t>(kernels::column_chunks(N)) * C;
  auto* partial = static_cast<float*>(reduce_.get(floats * sizeof(float), stream_));
  kernels::layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, N, C, partial, stream_);
}

// ------------------------------------------------------------------------------------------------ attention
// Per sequence b, the NH heads are one strided batch: head h's q, k, v are [T,HS] row blocks of qkv with row
// stride 3*NH*HS and head stride 3*HS, its scores a [T,T] block of att. The products cover the full T x T
// square (the masked half is overwritten with zeros by the softmax), as in llm.c.
void CudaBackend::attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) {
  const int C3 = 3 * NH * HS, CY = NH * HS;
  const long long TT = static_cast<long long>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (int b = 0; b < B; b++) {
    const float* q = qkv + static_cast<long long>(b) * T * C3;
    // att[h] = scale * q[h] k[h]^T
    sgemm_strided(att + b * NH * TT, q, q + HS, T, T, HS, false, true, C3, C3, T, 3 * HS, 3 * HS, TT, NH, scale, 0.0f);
  }
  kernels::causal_softmax_forward(att, B * NH, T, stream_);
  for (int b = 0; b < B; b++) {
    const float* q = qkv + static_cast<long long>(b) * T * C3;
    // out[h] = att[h] v[h]
    sgemm_strided(out + static_cast<long long>(b) * T * CY, att + b * NH * TT, q + 2 * HS, T, HS, T, false, false, T,
                  C3, CY, TT, 3 * HS, HS, NH, 1.0f, 0.0f);
  }
}

void CudaBackend::attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                                     int B, int T, int NH, int HS) {
  const int C3 = 3 * NH * HS, CY = NH * HS;
  const long long TT = static_cast<long long>(T) * T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  for (int b = 0; b < B; b++) {
    const float* q = qkv + static_cast<long long>(b) * T * C3;
    float* dq = dqkv + static_cast<long long>(b) * T * C3;
    const float* d = dout + static_cast<long long>(b) * T * CY;
    const float* a = att + b * NH * TT;
    // datt[h] = dout[h] v[h]^T
    sgemm_strided(datt + b * NH * TT, d, q + 2 * HS, T, T, HS, false, true, CY, C3, T, HS, 3 * HS, TT, NH, 1.0f, 0.0f);
    // dv[h] = att[h]^T dout[h]
    sgemm_strided(dq + 2 * HS, a, d, T, HS, T, true, false, T, CY, C3, TT, HS, 3 * HS, NH, 1.0f, 0.0f);
  }
  kernels::causal_softmax_backward(datt, att, scale, B * NH, T, stream_);  // datt := d(scores) * scale
  for (int b = 0; b < B; b++) {
    const float* q = qkv + static_cast<long long>(b) * T * C3;
    float* dq = dqkv + static_cast<long long>(b) * T * C3;
    const float* ds = datt + b * NH * TT;
    // dq[h] = ds[h] k[h];  dk[h] = ds[h]^T q[h]
    sgemm_strided(dq, ds, q + HS, T, HS, T, false, false, T, C3, C3, TT, 3 * HS, 3 * HS, NH, 1.0f, 0.0f);
    sgemm_strided(dq + HS, ds, q, T, HS, T, true, false, T, C3, C3, TT, 3 * HS, 3 * HS, NH, 1.0f, 0.0f);
  }
}

// ------------------------------------------------------------------------------------------------ pointwise
void CudaBackend::gelu_forward(float* out, const float* inp, std::size_t N) {
  kernels::gelu_forward(out, inp, N, stream_);
}
void CudaBackend::gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N) {
  kernels::gelu_backward(dinp, dout, inp, N, stream_);
}
void CudaBackend::delay(long long ns) { kernels::delay(ns, stream_); }

void CudaBackend::residual_forward(float* out, const float* a, const float* b, std::size_t N) {
  kernels::residual_forward(out, a, b, N, stream_);
}

// ------------------------------------------------------------------------------------------------ loss
void CudaBackend::crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B,
                                       int T, int V) {
  kernels::crossentropy_forward(losses, probs, logits, targets, B * T, V, stream_);
}
void CudaBackend::crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B,
                                        int T, int V) {
  kernels::crossentropy_backward(dlogits, probs, targets, scale, B * T, V, stream_);
}

// ------------------------------------------------------------------------------------------------ optimizer
void CudaBackend::adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float lr,
                               float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
  // The same float expressions as the CPU kernel, evaluated once on the host.
  const float bc1 = 1.0f - std::pow(beta1, static_cast<float>(t));
  const float bc2_sqrt = std::sqrt(1.0f - std::pow(beta2, static_cast<float>(t)));
  const float step_size = lr / bc1;
  const float decay = 1.0f - lr * weight_decay;
  kernels::adamw_update(params, m, v, grads, N, beta1, beta2, eps, grad_scale, step_size, bc2_sqrt, decay, stream_);
}

double CudaBackend::sum_squares(const float* x, std::size_t N) {
  if (N == 0) return 0.0;
  const int blocks = kernels::sum_squares_blocks(N);
  auto* dev = static_cast<double*>(reduce_.get((blocks + 1) * sizeof(double), stream_));
  kernels::sum_squares(dev + blocks, dev, x, N, stream_);
  cudaCheck(cudaMemcpyAsync(host_result_, dev + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream_));
  cudaCheck(cudaStreamSynchronize(stream_));  // the value is returned to the host
  return *host_result_;
}

void CudaBackend::sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count) {
  if (count <= 0) return;
  // Layout in the scratch: count results, then each tensor's partial sums.
  std::size_t slots = static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    if (ns[i] > 0) slots += static_cast<std::size_t>(kernels::sum_squares_blocks(ns[i]));
  }
  auto* dev = static_cast<double*>(reduce_.get(slots * sizeof(double), stream_));
  cudaCheck(cudaMemsetAsync(dev, 0, static_cast<std::size_t>(count) * sizeof(double), stream_));  // empty tensors
  std::size_t partial = static_cast<std::size_t>(count);
  for (int i = 0; i < count; ++i) {
    if (ns[i] == 0) continue;
    kernels::sum_squares(dev + i, dev + partial, xs[i], ns[i], stream_);
    partial += static_cast<std::size_t>(kernels::sum_squares_blocks(ns[i]));
  }
  // To pageable memory: returns once the copy is done (the one host round trip of the whole norm).
  cudaCheck(
      cudaMemcpyAsync(out, dev, static_cast<std::size_t>(count) * sizeof(double), cudaMemcpyDeviceToHost, stream_));
  cudaCheck(cudaStreamSynchronize(stream_));
}

std::unique_ptr<Backend> make_cuda_backend(const CudaOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace conductor::model::cuda
