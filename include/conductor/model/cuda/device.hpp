#pragma once
// What the CUDA driver offers this process (no MPI here: choosing one GPU per rank is the runtime's job,
// runtime/cuda/device_selection.hpp). Include only from code built with CONDUCTOR_HAVE_CUDA.

namespace conductor::model::cuda {

// Number of visible CUDA devices; 0 when there is no device or no usable driver (never throws).
int device_count();
// Why device_count() is 0 ("no CUDA-capable device is detected", "CUDA driver version is insufficient...").
const char* no_device_reason();

}  // namespace conductor::model::cuda
