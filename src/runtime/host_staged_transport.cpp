// Tensors in GPU memory over a host transport: device -> pinned host -> MPI -> pinned host -> device (see
// host_staged_transport.hpp). Compiled into every build (src/runtime/*.cpp); empty without CUDA.
#ifdef CONDUCTOR_HAVE_CUDA

#include "conductor/runtime/host_staged_transport.hpp"

#include <algorithm>
#include <utility>

#include "conductor/model/cuda/check.hpp"

namespace conductor::runtime {

using cuda::Backoff;
using cuda::event_done;
using cuda::make_comm_stream;

HostStagedTransport::HostStagedTransport(std::unique_ptr<Transport> host_transport, cudaStream_t compute_stream)
    : host_(std::move(host_transport)), compute_(compute_stream) {
  copy_ = make_comm_stream();
  ready_ = events_.take();
}

HostStagedTransport::~HostStagedTransport() {
  if (copy_) cudaStreamSynchronize(copy_);
  host_.reset();  // cancels pending host receives before their staging buffers go
  for (void* p : pinned_all_) cudaFreeHost(p);
  if (copy_) cudaStreamDestroy(copy_);
}

void* HostStagedTransport::take_pinned(std::size_t bytes, std::size_t& capacity) {
  auto it = pinned_free_.lower_bound(bytes);
  if (it != pinned_free_.end() && it->first <= 2 * bytes + 4096) {  // reuse a buffer of about this size
    capacity = it->first;
    void* p = it->second;
    pinned_free_.erase(it);
    return p;
  }
  void* p = nullptr;
  capacity = std::max<std::size_t>(bytes, 1);
  cudaCheck(cudaMallocHost(&p, capacity));
  pinned_all_.push_back(p);
  return p;
}

void HostStagedTransport::give_pinned(void* p, std::size_t capacity) { pinned_free_.emplace(capacity, p); }

TransferId HostStagedTransport::post_send(int peer, int tag, const void* data, std::size_t bytes) {
  const TransferId id = next_++;
  Transfer t;
  t.send = true;
  t.peer = peer;
  t.tag = tag;
  t.device = const_cast<void*>(data);
  t.bytes = bytes;
  t.host = take_pinned(bytes, t.host_bytes);
  cudaCheck(cudaEventRecord(ready_, compute_));
  cudaCheck(cudaStreamWaitEvent(copy_, ready_, 0));  // the wait binds to this record; ready_ is free again
  cudaCheck(cudaMemcpyAsync(t.host, data, bytes, cudaMemcpyDeviceToHost, copy_));
  t.event = events_.take();
  cudaCheck(cudaEventRecord(t.event, copy_));
  t.phase = Phase::DeviceToHost;
  transfers_.emplace(id, t);
  progress();
  return id;
}

TransferId HostStagedTransport::post_recv(int peer, int tag, void* data, std::size_t bytes) {
  const TransferId id = next_++;
  Transfer t;
  t.peer = peer;
  t.tag = tag;
  t.device = data;
  t.bytes = bytes;
  t.host = take_pinned(bytes, t.host_bytes);
  t.event = events_.take();
  cudaCheck(cudaEventRecord(t.event, compute_));  // the device copy waits for work queued before this call
  t.phase = Phase::Host;
  t.inner = host_->post_recv(peer, tag, t.host, bytes);
  by_inner_[t.inner] = id;
  transfers_.emplace(id, t);
  progress();
  return id;
}

void HostStagedTransport::complete(TransferId id) {
  auto it = transfers_.find(id);
  give_pinned(it->second.host, it->second.host_bytes);
  events_.give(it->second.event);
  transfers_.erase(it);
  completed_.push_back(id);
}

void HostStagedTransport::progress() {
  std::vector<TransferId> finished;
  for (auto& [id, t] : transfers_) {
    if (t.phase == Phase::DeviceToHost && event_done(t.event)) {
      t.inner = host_->post_send(t.peer, t.tag, t.host, t.bytes);
      by_inner_[t.inner] = id;
      t.phase = Phase::Host;
    }
  }
  for (TransferId inner : host_->poll()) {
    auto m = by_inner_.find(inner);
    if (m == by_inner_.end()) continue;
    const TransferId id = m->second;
    by_inner_.erase(m);
    Transfer& t = transfers_.at(id);
    if (t.send) {
      finished.push_back(id);
    } else {
      cudaCheck(cudaStreamWaitEvent(copy_, t.event, 0));
      cudaCheck(cudaMemcpyAsync(t.device, t.host, t.bytes, cudaMemcpyHostToDevice, copy_));
      cudaCheck(cudaEventRecord(t.event, copy_));
      t.phase = Phase::HostToDevice;
    }
  }
  for (auto& [id, t] : transfers_) {
    if (t.phase == Phase::HostToDevice && event_done(t.event)) finished.push_back(id);
  }
  for (TransferId id : finished) complete(id);
}

bool HostStagedTransport::test(TransferId id) {
  progress();
  auto it = std::find(completed_.begin(), completed_.end(), id);
  if (it != completed_.end()) {
    completed_.erase(it);
    return true;
  }
  return transfers_.count(id) == 0;  // unknown ids were reported before
}

std::vector<TransferId> HostStagedTransport::poll() {
  progress();
  return std::exchange(completed_, {});
}

std::vector<TransferId> HostStagedTransport::wait_some() {
  Backoff backoff;
  while (!transfers_.empty() || !completed_.empty()) {
    auto done = poll();
    if (!done.empty()) return done;
    backoff.pause();
  }
  return {};
}

}  // namespace conductor::runtime

#endif  // CONDUCTOR_HAVE_CUDA
