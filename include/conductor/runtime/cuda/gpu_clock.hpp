#pragma once
// Timing ops on the GPU's own clock (CUDA events), mapped to the host's steady clock (the clock of
// runtime::steady_now_ns(); CommonClock::to_common() then maps to the run's common clock). The host never
// waits for the GPU to time an op: mark() records an event, and the time is read once query() says the event
// has completed. Include only from code built with CONDUCTOR_HAVE_CUDA.
//
// Mapping: an anchor event is recorded and polled until it completes; the host steady time of the first poll
// that sees it complete is the anchor's host time (error: one poll interval, a few microseconds, plus the
// driver's completion latency). An op's time is anchor_host + cudaEventElapsedTime(anchor, event). GPU and
// host clocks drift apart by parts per million and elapsed times are floats in ms, so the owner re-anchors at
// a quiet point, e.g. once per step (reanchor(), which blocks until the stream drains).
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace conductor::runtime::cuda {

class GpuClock {
 public:
  explicit GpuClock(cudaStream_t stream);
  ~GpuClock();
  GpuClock(const GpuClock&) = delete;
  GpuClock& operator=(const GpuClock&) = delete;

  void reanchor();                              // host-blocking; call when the stream is idle or at a step boundary
  cudaEvent_t mark();                           // records an event at the current end of the stream
  bool query(cudaEvent_t e) const;              // non-blocking: has the GPU passed the mark?
  std::int64_t steady_ns(cudaEvent_t e) const;  // host steady-clock ns of a completed mark
  void recycle(cudaEvent_t e) { free_.push_back(e); }

 private:
  cudaStream_t stream_;
  cudaEvent_t anchor_ = nullptr;
  std::int64_t anchor_ns_ = 0;
  std::vector<cudaEvent_t> free_, all_;
};

}  // namespace conductor::runtime::cuda
