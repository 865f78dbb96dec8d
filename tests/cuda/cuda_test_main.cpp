// gtest main of the CUDA tests: without a usable GPU the binary reports SKIPPED with the reason and exits 77
// (the tests' SKIP_RETURN_CODE), so ctest shows "Skipped", never a silent pass.
#include <gtest/gtest.h>

#include <cstdio>

#include "conductor/model/cuda/device.hpp"

int main(int argc, char** argv) {
  namespace cu = conductor::model::cuda;
  if (cu::device_count() == 0) {
    std::printf("SKIPPED: no CUDA device (%s)\n", cu::no_device_reason());
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
