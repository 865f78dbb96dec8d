// The CPU backend: host memory and the kernels of cpu_kernels.cpp.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "conductor/model/backend.hpp"
#include "conductor/util/error.hpp"
#include "kernel_table.hpp"

namespace conductor::model {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend() : Backend(cpu_kernel_table()) {
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
  bool host_memory() const override { return true; }

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
