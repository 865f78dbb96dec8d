// The CPU backend: host memory and the kernels of cpu_kernels.cpp.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "conductor/model/adamw.hpp"
#include "conductor/model/attention.hpp"
#include "conductor/model/backend.hpp"
#include "conductor/model/crossentropy.hpp"
#include "conductor/model/encoder.hpp"
#include "conductor/model/gelu.hpp"
#include "conductor/model/gemm.hpp"
#include "conductor/model/layernorm.hpp"
#include "conductor/util/error.hpp"

namespace conductor::model {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    // Threads: OMP_NUM_THREADS when set. Otherwise, under an MPI launcher, the cores are shared among the
    // node's ranks: oversubscribed OpenMP/OpenBLAS threads spin against each other (on a loaded 2-core box,
    // 2 threads per process made the quickstart step 17x slower than 1).
    if (!std::getenv("OMP_NUM_THREADS")) {
      const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
      if (!local) local = std::getenv("MPI_LOCALNRANKS");  // MPICH / Intel MPI
      const int ranks = local ? std::atoi(local) : 0;
      if (ranks > 1) omp_set_num_threads(std::max(1, omp_get_num_procs() / ranks));
    }
    // OpenBLAS keeps its own thread pool; size it like OpenMP's so the two never oversubscribe the cores.
    openblas_set_num_threads(omp_get_max_threads());
  }
  std::string name() const override { return "cpu"; }

  void* alloc(std::size_t bytes) override {
    const std::size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw Error("cpu backend: out of memory allocating " + std::to_string(bytes) + " bytes");
    return p;
  }
  void release(void* ptr) override { std::free(ptr); }
  // A zero-byte buffer has no allocation (DeviceBuffer holds nullptr), and memcpy/memset of a null pointer is
  // undefined even for 0 bytes, so empty transfers return early.
  void upload(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (bytes && dst != src) std::memcpy(dst, src, bytes);
  }
  void zero(void* dst, std::size_t bytes) override {
    if (bytes) std::memset(dst, 0, bytes);
  }

  void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool ta, bool tb, float alpha,
            float beta) override {
    cpu::gemm(c, a, b, m, n, k, ta, tb, alpha, beta);
  }
  void bias_forward(float* out, const float* bias, int N, int OC) override { cpu::bias_forward(out, bias, N, OC); }
  void bias_backward(float* dbias, const float* dout, int N, int OC) override {
    cpu::bias_backward(dbias, dout, N, OC);
  }
  void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                       int C) override {
    cpu::encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) override {
    cpu::encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                         int B, int T, int C) override {
    cpu::layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C);
  }
  void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                const float* mean, const float* rstd, int B, int T, int C) override {
    cpu::layernorm_backward_input(dinp, dout, inp, weight, mean, rstd, B, T, C);
  }
  void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                                 const float* rstd, int B, int T, int C) override {
    cpu::layernorm_backward_weight(dweight, dbias, dout, inp, mean, rstd, B, T, C);
  }
  void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) override {
    cpu::attention_forward(out, att, qkv, B, T, NH, HS);
  }
  void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att, int B, int T,
                          int NH, int HS) override {
    cpu::attention_backward(dqkv, datt, dout, qkv, att, B, T, NH, HS);
  }
  void gelu_forward(float* out, const float* inp, std::size_t N) override { cpu::gelu_forward(out, inp, N); }
  void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N) override {
    cpu::gelu_backward(dinp, dout, inp, N);
  }
  void residual_forward(float* out, const float* a, const float* b, std::size_t N) override {
    cpu::residual_forward(out, a, b, N);
  }
  void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T,
                            int V) override {
    cpu::crossentropy_forward(losses, probs, logits, targets, B, T, V);
  }
  void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B, int T,
                             int V) override {
    cpu::crossentropy_backward(dlogits, probs, targets, scale, B, T, V);
  }
  void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float lr, float beta1,
                    float beta2, float eps, float weight_decay, float grad_scale, int t) override {
    cpu::adamw_update(params, m, v, grads, N, lr, beta1, beta2, eps, weight_decay, grad_scale, t);
  }
  double sum_squares(const float* x, std::size_t N) override { return cpu::sum_squares(x, N); }
};

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& name) {
  if (name == "cpu") return std::make_unique<CpuBackend>();
  throw InputError("model backend '" + name + "' is not available in this build (available: cpu)");
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace conductor::model
