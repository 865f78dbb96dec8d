// cuBLAS is opened by the first CUDA backend, not linked (src/model/cuda/cublas_library.cpp). These run without
// a GPU: opening cuBLAS and its status texts need none.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "conductor/model/cuda/cublas_library.hpp"
#include "conductor/util/error.hpp"

namespace cuda = conductor::model::cuda;

namespace {

bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  const std::string text{std::istreambuf_iterator<char>(maps), std::istreambuf_iterator<char>()};
  return text.find("libcublas") != std::string::npos;
}

std::string load_error(const std::vector<std::string>& candidates) {
  try {
    cuda::load_cublas(candidates);
  } catch (const conductor::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// First in this file: ctest runs each test in a process of its own, and so does a plain run of the binary up to
// here (gtest keeps the order of definition).
TEST(CublasLibrary, OpenedOnFirstUseNotAtStartUp) {
  EXPECT_FALSE(cublas_mapped()) << "libcublas is mapped before any CUDA backend: is it linked again?";
  const auto& api = cuda::cublas();
  EXPECT_TRUE(cublas_mapped());
  EXPECT_STREQ(api.status_name(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_NE(std::string(api.status_string(CUBLAS_STATUS_ALLOC_FAILED)), "");
  EXPECT_EQ(&cuda::cublas(), &api);  // once per process
}

TEST(CublasLibrary, CandidatesStartWithTheSonameOfTheHeaders) {
  const auto files = cuda::cublas_candidates();
  ASSERT_FALSE(files.empty());
  EXPECT_EQ(files.front(), "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR));
  EXPECT_EQ(files.size(), 2u);  // and the file CMake found
}

TEST(CublasLibrary, NoLoadableFileNamesEveryFileTried) {
  const std::string message = load_error({"/nonexistent/libcublas.so.13", "/etc/hostname"});
  EXPECT_NE(message.find("cannot load cuBLAS"), std::string::npos) << message;
  EXPECT_NE(message.find("/nonexistent/libcublas.so.13: "), std::string::npos) << message;
  EXPECT_NE(message.find("/etc/hostname: "), std::string::npos) << message;
  EXPECT_NE(message.find("LD_LIBRARY_PATH"), std::string::npos) << message;
}

TEST(CublasLibrary, ALibraryWithoutTheEntryPointsIsNotTaken) {
  // libz opens, but is no cuBLAS: the message says which entry point it lacks.
  const std::string message = load_error({"libz.so.1"});
  EXPECT_NE(message.find("libz.so.1: has no cublasCreate_v2"), std::string::npos) << message;
}
