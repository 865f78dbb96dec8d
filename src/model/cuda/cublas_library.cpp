#include "conductor/model/cuda/cublas_library.hpp"

#include <dlfcn.h>

#include <optional>
#include <type_traits>

#include "conductor/util/error.hpp"

namespace conductor::model::cuda {

namespace {

// The symbol a cublas_v2.h name stands for (cublasSgemm -> "cublasSgemm_v2"): stringised after expansion.
#define CONDUCTOR_SYMBOL_NAME(name) CONDUCTOR_SYMBOL_TEXT(name)
#define CONDUCTOR_SYMBOL_TEXT(name) #name

// Resolves every entry point from an opened library; returns the first missing symbol's name, or nothing.
std::optional<std::string> resolve(void* lib, CublasApi& api) {
  std::optional<std::string> missing;
  const auto bind = [&](auto& fn, const char* symbol) {
    void* p = ::dlsym(lib, symbol);
    if (!p && !missing) missing = symbol;
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
  };
  bind(api.create, CONDUCTOR_SYMBOL_NAME(cublasCreate));
  bind(api.destroy, CONDUCTOR_SYMBOL_NAME(cublasDestroy));
  bind(api.set_stream, CONDUCTOR_SYMBOL_NAME(cublasSetStream));
  bind(api.set_math_mode, CONDUCTOR_SYMBOL_NAME(cublasSetMathMode));
  bind(api.sgemm, CONDUCTOR_SYMBOL_NAME(cublasSgemm));
  bind(api.sgemm_strided_batched, CONDUCTOR_SYMBOL_NAME(cublasSgemmStridedBatched));
  bind(api.gemm_ex, "cublasGemmEx");
  bind(api.status_name, CONDUCTOR_SYMBOL_NAME(cublasGetStatusName));
  bind(api.status_string, CONDUCTOR_SYMBOL_NAME(cublasGetStatusString));
  return missing;
}

}  // namespace

std::vector<std::string> cublas_candidates() {
  std::vector<std::string> files{"libcublas.so." + std::to_string(CUBLAS_VER_MAJOR)};
#ifdef CONDUCTOR_CUBLAS_BUILD_PATH
  files.emplace_back(CONDUCTOR_CUBLAS_BUILD_PATH);
#endif
  return files;
}

CublasApi load_cublas(const std::vector<std::string>& candidates) {
  std::string tried;
  for (const auto& file : candidates) {
    // RTLD_LOCAL: cuBLAS's symbols stay out of the process's namespace; it finds its cublasLt by its run path.
    void* lib = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = ::dlerror();
      tried += "\n  " + file + ": " + (why ? why : "not loaded");
      continue;
    }
    CublasApi api;
    if (const auto missing = resolve(lib, api)) {
      tried += "\n  " + file + ": has no " + *missing + " (a cuBLAS older than the " +
               std::to_string(CUBLAS_VER_MAJOR) + ".x headers this build used)";
      ::dlclose(lib);
      continue;
    }
    return api;  // never closed: cuBLAS keeps process-wide state until exit
  }
  throw Error("cuda: cannot load cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
              ".x, which the CUDA backend needs (install it, or put its folder on LD_LIBRARY_PATH); tried:" + tried);
}

const CublasApi& cublas() {
  // Initialised once, thread-safely; an initialiser that throws leaves it uninitialised, so every call until one
  // loads cuBLAS tries again and throws the same error.
  static const CublasApi api = load_cublas(cublas_candidates());
  return api;
}

}  // namespace conductor::model::cuda
