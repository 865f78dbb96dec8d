#pragma once
// Tensors in GPU memory over a host transport (CUDA builds only; include from code guarded by
// CONDUCTOR_HAVE_CUDA).
//
// HostStagedTransport: device buffers over a host transport (MpiTransport): device -> pinned host copy, host
//   transfer, host -> device copy, on a copy stream ordered after `compute_stream`: a send reads the data as of
//   the work queued on that stream before post_send; a receive overwrites its buffer only after the work queued
//   before post_recv. For ranks that share a GPU (NCCL needs one GPU per rank, nccl_transport.hpp) and for MPI
//   libraries that are not CUDA-aware.
#ifndef CONDUCTOR_HAVE_CUDA
#error "host_staged_transport.hpp needs a CUDA build (include it under #ifdef CONDUCTOR_HAVE_CUDA)"
#endif
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "conductor/runtime/cuda/transfer_util.hpp"
#include "conductor/runtime/transport.hpp"

namespace conductor::runtime {

class HostStagedTransport final : public Transport {
 public:
  HostStagedTransport(std::unique_ptr<Transport> host_transport, cudaStream_t compute_stream);
  ~HostStagedTransport() override;
  HostStagedTransport(const HostStagedTransport&) = delete;
  HostStagedTransport& operator=(const HostStagedTransport&) = delete;

  TransferId post_send(int peer, int tag, const void* data, std::size_t bytes) override;
  TransferId post_recv(int peer, int tag, void* data, std::size_t bytes) override;
  bool test(TransferId id) override;
  std::vector<TransferId> poll() override;
  std::vector<TransferId> wait_some() override;
  std::size_t pending() const override { return transfers_.size() + completed_.size(); }
  bool orders_after_compute() const override { return true; }

 private:
  enum class Phase { DeviceToHost, Host, HostToDevice };
  struct Transfer {
    bool send = false;
    int peer = -1, tag = 0;
    void* device = nullptr;
    std::size_t bytes = 0;
    void* host = nullptr;         // pinned staging buffer
    std::size_t host_bytes = 0;   // its capacity
    cudaEvent_t event = nullptr;  // the pending copy's completion
    Phase phase = Phase::Host;
    TransferId inner = -1;
  };
  void progress();
  void* take_pinned(std::size_t bytes, std::size_t& capacity);
  void give_pinned(void* p, std::size_t capacity);
  void complete(TransferId id);

  std::unique_ptr<Transport> host_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  std::map<TransferId, Transfer> transfers_;
  std::map<TransferId, TransferId> by_inner_;
  std::vector<TransferId> completed_;  // finished, not yet reported
  std::multimap<std::size_t, void*> pinned_free_;
  std::vector<void*> pinned_all_;
  cuda::EventPool events_;
  cudaEvent_t ready_ = nullptr;  // compute stream position, waited on by the copy stream right away
  TransferId next_ = 0;
};

}  // namespace conductor::runtime
