#pragma once
// cuBLAS, opened when the first CUDA backend is made (dlopen) instead of linked into the binary: libcublasLt
// (over 500 MB) costs every process about 0.35 s to map and relocate, paid by every CPU run, validate and test
// on a machine that has CUDA, and by every rank. Only the entry points conductor calls are resolved.
// Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <cublas_v2.h>

#include <string>
#include <vector>

namespace conductor::model::cuda {

// The cuBLAS functions conductor calls, with cublas_v2.h's signatures (the _v2 symbols where it maps a name).
// cublasGemmEx is spelled out: C++ sees a second, inline overload of it in cublas_api.h.
struct CublasApi {
  decltype(&::cublasCreate) create = nullptr;
  decltype(&::cublasDestroy) destroy = nullptr;
  decltype(&::cublasSetStream) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSgemm) sgemm = nullptr;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&::cublasGetStatusName) status_name = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
};

// The files tried, in order: the soname of the cuBLAS the build compiled against (found through LD_LIBRARY_PATH,
// the binary's run path and the system's library folders), then the library file CMake found at build time.
std::vector<std::string> cublas_candidates();

// Opens the first candidate that loads and resolves every entry point; the library stays loaded for the
// process. Throws Error naming each file tried and the loader's reason when none does.
CublasApi load_cublas(const std::vector<std::string>& candidates);

// load_cublas(cublas_candidates()), once per process (thread-safe); a failure is thrown again at every call.
const CublasApi& cublas();

}  // namespace conductor::model::cuda
