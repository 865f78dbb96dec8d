#pragma once
// The kernel backend: every piece of math and memory the trainer does goes through this interface, so a CUDA
// backend implements the same signatures on device pointers and the model code above it does not change.
// Conventions (llm.c): raw float pointers in the backend's memory space, outputs first, inputs next, shapes
// last; tensors are contiguous row-major with the shape given in the comment. "+=" marks kernels that
// accumulate into their output (gradients accumulate over microbatches and over slices); all others overwrite.
#include <cstddef>
#include <memory>
#include <string>

namespace conductor::model {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // ---- memory (bytes; alloc returns memory aligned for any kernel, never null, throws on failure) ----
  virtual void* alloc(std::size_t bytes) = 0;
  virtual void release(void* ptr) = 0;
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;    // host -> backend
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;  // backend -> host
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;           // backend -> backend
  virtual void zero(void* dst, std::size_t bytes) = 0;
  virtual void synchronize() {}

  // ---- dense ----
  // c[m,n] = alpha * op(a) @ op(b) + beta * c; op(a) is [m,k] (a stored [k,m] when trans_a), op(b) is [k,n]
  // (b stored [n,k] when trans_b). All operands contiguous.
  virtual void gemm(float* c, const float* a, const float* b, int m, int n, int k, bool trans_a, bool trans_b,
                    float alpha, float beta) = 0;
  // out[n, :] += bias, out [N, OC], bias [OC]
  virtual void bias_forward(float* out, const float* bias, int N, int OC) = 0;
  // dbias += sum over n of dout[n, :]; dbias [OC], dout [N, OC]
  virtual void bias_backward(float* dbias, const float* dout, int N, int OC) = 0;

  // ---- embedding ----
  // out[b,t,:] = wte[tokens[b,t], :] + wpe[t, :]; out [B,T,C], tokens [B,T], wte [V,C], wpe [maxT,C]
  virtual void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                               int C) = 0;
  // dwte, dwpe += scatter of dout [B,T,C]
  virtual void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                int C) = 0;

  // ---- layernorm (eps 1e-5) ----
  // out [B,T,C], mean [B,T], rstd [B,T], inp [B,T,C], weight [C], bias [C]
  virtual void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                 const float* bias, int B, int T, int C) = 0;
  // B part: dinp += d(LN)/d(inp) applied to dout; dinp, dout, inp [B,T,C]
  virtual void layernorm_backward_input(float* dinp, const float* dout, const float* inp, const float* weight,
                                        const float* mean, const float* rstd, int B, int T, int C) = 0;
  // W part: dweight += sum dout * normalized(inp); dbias += sum dout; dweight, dbias [C]
  virtual void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                                         const float* mean, const float* rstd, int B, int T, int C) = 0;

  // ---- causal self-attention over NH heads, qkv grouped per head: qkv [B,T,NH,3,HS] (q, k, v of head h are
  // contiguous, so a head group is a contiguous block of the fused QKV projection) ----
  // out [B,T,NH,HS], att [B,NH,T,T] (softmax probabilities, zero above the diagonal)
  virtual void attention_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int HS) = 0;
  // dqkv [B,T,NH,3,HS] (overwritten), datt [B,NH,T,T] scratch, dout [B,T,NH,HS]
  virtual void attention_backward(float* dqkv, float* datt, const float* dout, const float* qkv, const float* att,
                                  int B, int T, int NH, int HS) = 0;

  // ---- pointwise ----
  // GELU, tanh approximation (GPT-2). out, inp [N]
  virtual void gelu_forward(float* out, const float* inp, std::size_t N) = 0;
  // dinp = dout * gelu'(inp); dinp may alias dout
  virtual void gelu_backward(float* dinp, const float* dout, const float* inp, std::size_t N) = 0;
  // out = a + b; out may alias a or b
  virtual void residual_forward(float* out, const float* a, const float* b, std::size_t N) = 0;

  // ---- loss ----
  // losses [B,T] = -log softmax(logits)[target], probs [B,T,V], logits [B,T,V], targets [B,T]
  virtual void crossentropy_forward(float* losses, float* probs, const float* logits, const int* targets, int B, int T,
                                    int V) = 0;
  // dlogits = scale * (probs - onehot(targets)); dlogits may alias probs
  virtual void crossentropy_backward(float* dlogits, const float* probs, const int* targets, float scale, int B, int T,
                                     int V) = 0;

  // ---- optimizer ----
  // AdamW (PyTorch semantics), t = 1-based update count; g = grads * grad_scale (global-norm clipping).
  // params, m, v, grads [N]
  virtual void adamw_update(float* params, float* m, float* v, const float* grads, std::size_t N, float lr, float beta1,
                            float beta2, float eps, float weight_decay, float grad_scale, int t) = 0;
  // sum of x^2 in double, deterministic for a given N (independent of thread timing)
  virtual double sum_squares(const float* x, std::size_t N) = 0;
  // out[i] = sum_squares(xs[i], ns[i]) for `count` tensors; device backends read all results back in one
  // host round trip (the gradient norm at the end of a step covers every parameter tensor).
  virtual void sum_squares_each(double* out, const float* const* xs, const std::size_t* ns, int count) {
    for (int i = 0; i < count; ++i) out[i] = sum_squares(xs[i], ns[i]);
  }
};

// "cpu" (OpenBLAS + OpenMP). Throws InputError naming the backend for anything not built into this binary.
std::unique_ptr<Backend> make_backend(const std::string& name);

// The process-wide CPU backend (stateless), for code that does not choose.
Backend& cpu_backend();

// RAII owner of one backend allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::size_t bytes) : backend_(&backend), bytes_(bytes) {
    if (bytes_ > 0) ptr_ = backend.alloc(bytes_);
  }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : backend_(o.backend_), ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_;
      ptr_ = o.ptr_;
      bytes_ = o.bytes_;
      o.ptr_ = nullptr;
      o.bytes_ = 0;
    }
    return *this;
  }
  void reset() {
    if (ptr_) backend_->release(ptr_);
    ptr_ = nullptr;
    bytes_ = 0;
  }
  float* f() const { return static_cast<float*>(ptr_); }
  int* i() const { return static_cast<int*>(ptr_); }
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace conductor::model
