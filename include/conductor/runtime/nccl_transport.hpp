#pragma once
// Tensors in GPU memory over NCCL (CUDA builds only; include from code guarded by CONDUCTOR_HAVE_CUDA). Ranks
// that share a GPU use host_staged_transport.hpp instead.
//
// NcclTransport: NCCL point-to-point, one two-rank communicator per directed pipeline edge (sender -> receiver).
//   Why not one communicator for the whole pipeline: NCCL runs every operation of a communicator in issue order
//   on each rank, and a send of more than NCCL's buffer waits for its receive. With receives posted ahead of
//   need (the runtime's model) and traffic in both directions (activations down, gradients up), one shared
//   communicator deadlocks as soon as two ranks queue their mutual operations in opposite orders. With one
//   communicator and one stream per direction, each queue holds transfers of one sender in that sender's order.
//   Matching by tag: NCCL has no tags, so the sender announces each send (tag, bytes) to the receiver over MPI,
//   and the receiver issues one ncclRecv per announcement, in arrival order (= the sender's order), as soon as
//   it sees it: into the buffer of a posted receive with that tag (same-tag receives match in posting order,
//   as in MPI), or, when none is posted yet, into a device staging buffer that the matching post_recv later
//   copies from (MPI's "unexpected message" queue). So receives may be posted in any order and at any time,
//   and a sender's edge never waits for the receiver's runtime to post. Completion is a CUDA event per
//   transfer, checked with cudaEventQuery: no call blocks the host on the GPU, except wait_some(), which exists
//   to block. Progress (reading announcements) happens inside every call of this interface.
//   Buffers are device pointers of the backend whose stream is `compute_stream`: a send reads the data as of
//   the work queued on that stream before post_send; a receive overwrites its buffer only after the work queued
//   before post_recv (so the caller may post a receive into a buffer that is still being read).
#ifndef CONDUCTOR_HAVE_CUDA
#error "nccl_transport.hpp needs a CUDA build (include it under #ifdef CONDUCTOR_HAVE_CUDA)"
#endif
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "conductor/runtime/cuda/transfer_util.hpp"
#include "conductor/runtime/transport.hpp"

namespace conductor::runtime {

class NcclTransport final : public Transport {
 public:
  // Collective over comm (every rank of comm calls it). peers: the ranks of comm this rank exchanges tensors
  // with, in both directions (must be symmetric: q lists p iff p lists q; checked). The current CUDA device
  // (select_device()) is the one used. Ranks in comm are the peer numbers of post_send / post_recv.
  NcclTransport(MPI_Comm comm, const std::vector<int>& peers, cudaStream_t compute_stream);
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  TransferId post_send(int peer, int tag, const void* data, std::size_t bytes) override;
  TransferId post_recv(int peer, int tag, void* data, std::size_t bytes) override;
  bool test(TransferId id) override;
  std::vector<TransferId> poll() override;
  std::vector<TransferId> wait_some() override;
  std::size_t pending() const override { return transfers_.size(); }
  bool orders_after_compute() const override { return true; }

 private:
  struct Edge {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  struct Transfer {
    bool send = false;
    int peer = -1, tag = 0;
    void* data = nullptr;
    std::size_t bytes = 0;
    cudaEvent_t ready = nullptr;  // compute stream position at post time
    cudaEvent_t done = nullptr;   // recorded after the NCCL operation; null until issued
  };
  struct Announcement {
    long long tag, bytes;
  };
  void progress();  // reads announcements, issues matched receives, retires control messages
  void check_async_errors();
  bool finished(TransferId id, Transfer& t);
  void release(TransferId id);
  Edge& out_edge(int peer, const char* op);
  Edge& in_edge(int peer, const char* op);

  MPI_Comm ctrl_ = MPI_COMM_NULL;  // a duplicate of comm for announcements
  int rank_ = 0;
  cudaStream_t compute_ = nullptr;
  std::map<int, Edge> out_, in_;  // by peer
  std::map<TransferId, Transfer> transfers_;
  struct Unexpected {
    void* staging = nullptr;  // device memory from the stream-ordered allocator, freed on the edge stream
    std::size_t bytes = 0;
  };
  std::map<int, std::map<int, std::deque<TransferId>>> posted_recvs_;  // sender -> tag -> unissued receives
  std::map<int, std::map<int, std::deque<Unexpected>>> unexpected_;    // sender -> tag -> staged arrivals
  std::deque<std::pair<MPI_Request, std::unique_ptr<Announcement>>> ctrl_sends_;
  cuda::EventPool events_;
  TransferId next_ = 0;
};

}  // namespace conductor::runtime
