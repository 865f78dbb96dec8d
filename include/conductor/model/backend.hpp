#pragma once
// A backend: the memory of one device and that device's implementation of every model kernel. The kernels are
// free functions declared once, per family (matmul.hpp, encoder.hpp, layernorm.hpp, attention.hpp, gelu.hpp,
// crossentropy.hpp, adamw.hpp), and take the backend they run on as their last argument; a kernel call runs
// the implementation in the backend's kernel table (cpu_kernels.cpp or cuda/kernels.cu). So the model code
// above is written once for every device, and this interface holds only what differs per device besides the
// kernels: memory.
#include <cstddef>
#include <memory>
#include <string>

namespace conductor::model {

struct KernelTable;  // src/model/kernel_table.hpp

class Backend {
 public:
  explicit Backend(const KernelTable& kernels) : kernels_(&kernels) {}
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
  // True where the backend's memory is the host's (cpu): a kernel may then read and write host buffers in place,
  // and code that hands host data to a kernel can skip staging it through upload and download.
  virtual bool host_memory() const { return false; }

  // The implementations the kernel functions run on this backend.
  const KernelTable& kernels() const { return *kernels_; }

 private:
  const KernelTable* kernels_;
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
