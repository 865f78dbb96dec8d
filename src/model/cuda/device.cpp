// The CUDA devices this process sees (see device.hpp).
#include "conductor/model/cuda/device.hpp"

#include <cuda_runtime.h>

namespace conductor::model::cuda {

namespace {
cudaError_t count_devices(int& n) {
  n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    cudaGetLastError();  // a missing driver or device is an answer here, not a sticky error
    n = 0;
  }
  return err;
}
}  // namespace

int device_count() {
  int n = 0;
  count_devices(n);
  return n;
}

const char* no_device_reason() {
  int n = 0;
  const cudaError_t err = count_devices(n);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  return n == 0 ? "the driver reports 0 CUDA devices" : "CUDA devices are present";
}

}  // namespace conductor::model::cuda
