// Events, streams and waits of the GPU transports (see transfer_util.hpp).
#include "conductor/runtime/cuda/transfer_util.hpp"

#include "conductor/model/cuda/check.hpp"

namespace conductor::runtime::cuda {

EventPool::~EventPool() {
  for (cudaEvent_t e : all_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  all_.push_back(e);
  return e;
}

bool event_done(cudaEvent_t e) {
  const cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) {
    cudaGetLastError();  // not-ready is an answer, not an error; keep the error state clean
    return false;
  }
  cudaCheck(r);
  return false;
}

cudaStream_t make_comm_stream() {
  int lowest = 0, highest = 0;
  cudaCheck(cudaDeviceGetStreamPriorityRange(&lowest, &highest));
  cudaStream_t s = nullptr;
  cudaCheck(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, highest));
  return s;
}

}  // namespace conductor::runtime::cuda
