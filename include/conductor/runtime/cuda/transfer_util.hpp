#pragma once
// What both GPU transports (nccl_transport.hpp, host_staged_transport.hpp) use: recycled CUDA events, a
// non-blocking completion check, a high-priority stream for transfers, and the back-off of their blocking
// waits. Include only from code built with CONDUCTOR_HAVE_CUDA.
#include <cuda_runtime.h>

#include <chrono>
#include <thread>
#include <vector>

namespace conductor::runtime::cuda {

// Recycled CUDA events (timing disabled) so a transfer does not create one.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t take();
  void give(cudaEvent_t e) { free_.push_back(e); }

 private:
  std::vector<cudaEvent_t> free_;
  std::vector<cudaEvent_t> all_;
};

// True once `e` has completed; false while pending; throws on a device error.
bool event_done(cudaEvent_t e);

// A non-blocking stream of the highest priority: a transfer's small kernel or copy should not wait behind a
// queue of compute kernels.
cudaStream_t make_comm_stream();

// Blocking waits poll: spin briefly (transfers of a pipeline step are short), then back off in small sleeps so
// a rank waiting long does not burn the core its GPU driver threads need.
class Backoff {
 public:
  void pause() {
    if (++spins_ < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }

 private:
  int spins_ = 0;
};

}  // namespace conductor::runtime::cuda
