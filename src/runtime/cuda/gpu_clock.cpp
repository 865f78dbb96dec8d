// GPU op timing on CUDA events, mapped to the host steady clock (see gpu_clock.hpp).
#include "conductor/runtime/cuda/gpu_clock.hpp"

#include <chrono>
#include <cmath>

#include "conductor/model/cuda/check.hpp"
#include "conductor/util/error.hpp"

namespace conductor::runtime::cuda {

namespace {
std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

GpuClock::GpuClock(cudaStream_t stream) : stream_(stream) {
  cudaCheck(cudaEventCreate(&anchor_));  // timing enabled: elapsed times are measured from it
  reanchor();
}

GpuClock::~GpuClock() {
  if (anchor_) cudaEventDestroy(anchor_);
  for (cudaEvent_t e : all_) cudaEventDestroy(e);
}

void GpuClock::reanchor() {
  cudaCheck(cudaStreamSynchronize(stream_));  // the anchor must not wait behind queued work
  cudaCheck(cudaEventRecord(anchor_, stream_));
  while (true) {  // poll rather than cudaEventSynchronize: its wake-up latency would bias the anchor late
    const cudaError_t r = cudaEventQuery(anchor_);
    if (r == cudaSuccess) break;
    if (r != cudaErrorNotReady) cudaCheck(r);
  }
  anchor_ns_ = steady_now_ns();
  cudaGetLastError();  // clear the not-ready answers
}

cudaEvent_t GpuClock::mark() {
  cudaEvent_t e = nullptr;
  if (!free_.empty()) {
    e = free_.back();
    free_.pop_back();
  } else {
    cudaCheck(cudaEventCreate(&e));
    all_.push_back(e);
  }
  cudaCheck(cudaEventRecord(e, stream_));
  return e;
}

bool GpuClock::query(cudaEvent_t e) const {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r != cudaErrorNotReady) cudaCheck(r);
  cudaGetLastError();
  return false;
}

std::int64_t GpuClock::steady_ns(cudaEvent_t e) const {
  float ms = 0.0f;
  // Negative for marks recorded before the current anchor: cudaEventElapsedTime handles either order.
  cudaCheck(cudaEventElapsedTime(&ms, anchor_, e));
  return anchor_ns_ + static_cast<std::int64_t>(std::llround(static_cast<double>(ms) * 1e6));
}

}  // namespace conductor::runtime::cuda
