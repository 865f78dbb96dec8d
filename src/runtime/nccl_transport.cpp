// Tensors in GPU memory over NCCL point-to-point (see nccl_transport.hpp).
// Compiled into every build (src/runtime/*.cpp); empty without CUDA.
#ifdef CONDUCTOR_HAVE_CUDA

#include "conductor/runtime/nccl_transport.hpp"

#include <algorithm>
#include <string>
#include <utility>

#include "conductor/model/cuda/check.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::runtime {

using cuda::Backoff;
using cuda::event_done;
using cuda::make_comm_stream;

namespace {
constexpr int kIdTag = 7301;    // NCCL unique ids, constructor only
constexpr int kCtrlTag = 7302;  // send announcements

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("NCCL transport: ") + what + " failed: " + std::string(text, len));
}

}  // namespace

// ------------------------------------------------------------------------------------------------ NCCL
NcclTransport::NcclTransport(MPI_Comm comm, const std::vector<int>& peers, cudaStream_t compute_stream)
    : compute_(compute_stream) {
  int size = 1;
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size);
  std::vector<int> mine(size, 0), theirs(size, 0);
  std::string problem;
  for (int p : peers) {
    if (p < 0 || p >= size || p == rank_) {
      problem = "NCCL transport: rank " + std::to_string(rank_) + " lists peer " + std::to_string(p) +
                ", which is not another rank of the pipeline (0.." + std::to_string(size - 1) + ")";
    } else {
      mine[p] = 1;
    }
  }
  mpi_check(MPI_Alltoall(mine.data(), 1, MPI_INT, theirs.data(), 1, MPI_INT, comm), "MPI_Alltoall");
  for (int q = 0; q < size && problem.empty(); q++) {
    if (mine[q] != theirs[q]) {
      problem = "NCCL transport: rank " + std::to_string(mine[q] ? rank_ : q) + " lists rank " +
                std::to_string(mine[q] ? q : rank_) + " as a peer but not the other way round";
    }
  }
  mpi::check_all(problem.empty(), problem, kExitFailure, comm);
  mpi_check(MPI_Comm_dup(comm, &ctrl_), "MPI_Comm_dup");

  // One communicator per directed edge; the sender makes its unique id and sends it to the receiver.
  std::vector<int> list;
  for (int q = 0; q < size; q++) {
    if (mine[q]) list.push_back(q);
  }
  const std::size_t n = list.size();
  std::vector<ncclUniqueId> out_ids(n), in_ids(n);
  std::vector<MPI_Request> reqs(2 * n);
  for (std::size_t i = 0; i < n; i++) {
    ncclCheck(ncclGetUniqueId(&out_ids[i]));
    mpi_check(MPI_Isend(&out_ids[i], sizeof(ncclUniqueId), MPI_BYTE, list[i], kIdTag, ctrl_, &reqs[2 * i]),
              "MPI_Isend");
    mpi_check(MPI_Irecv(&in_ids[i], sizeof(ncclUniqueId), MPI_BYTE, list[i], kIdTag, ctrl_, &reqs[2 * i + 1]),
              "MPI_Irecv");
  }
  mpi_check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
  // All in one group, so ranks creating their edges in different orders do not wait on each other.
  ncclCheck(ncclGroupStart());
  for (std::size_t i = 0; i < n; i++) {
    ncclCheck(ncclCommInitRank(&out_[list[i]].comm, 2, out_ids[i], 0));  // sender = rank 0 of the edge
    ncclCheck(ncclCommInitRank(&in_[list[i]].comm, 2, in_ids[i], 1));
  }
  ncclCheck(ncclGroupEnd());
  for (int p : list) {
    out_[p].stream = make_comm_stream();
    in_[p].stream = make_comm_stream();
  }
  // Connect every edge now, all edges in one group: NCCL connects lazily at the first transfer and that setup
  // blocks the host until the peer joins it, which a later post_send must never do.
  if (n > 0) {
    char* probe = nullptr;
    cudaCheck(cudaMalloc(&probe, 2 * n));
    ncclCheck(ncclGroupStart());
    for (std::size_t i = 0; i < n; i++) {
      ncclCheck(ncclSend(probe + 2 * i, 1, ncclChar, 1, out_[list[i]].comm, out_[list[i]].stream));
      ncclCheck(ncclRecv(probe + 2 * i + 1, 1, ncclChar, 0, in_[list[i]].comm, in_[list[i]].stream));
    }
    ncclCheck(ncclGroupEnd());
    for (int p : list) {
      cudaCheck(cudaStreamSynchronize(out_[p].stream));
      cudaCheck(cudaStreamSynchronize(in_[p].stream));
    }
    cudaCheck(cudaFree(probe));
  }
}

NcclTransport::~NcclTransport() {
  // Nothing here may throw. With transfers still pending (error paths only) the peers may never match them,
  // so the communicators are aborted rather than destroyed (destroy would wait for the operations).
  const bool abort = !transfers_.empty();
  for (auto& [peer, by_tag] : unexpected_) {
    for (auto& [tag, queue] : by_tag) {
      for (const Unexpected& u : queue) {
        if (u.staging) cudaFreeAsync(u.staging, in_[peer].stream);
      }
    }
  }
  for (auto* edges : {&out_, &in_}) {
    for (auto& [peer, e] : *edges) {
      if (e.comm) abort ? ncclCommAbort(e.comm) : ncclCommDestroy(e.comm);
      if (e.stream) cudaStreamDestroy(e.stream);
    }
  }
  for (auto& [req, ann] : ctrl_sends_) {
    if (req == MPI_REQUEST_NULL) continue;
    if (!abort) {
      MPI_Wait(&req, MPI_STATUS_IGNORE);  // 16-byte eager messages: completes locally
    } else {
      MPI_Request_free(&req);
      ann.release();  // MPI may still read it after the request is freed: leak 16 bytes on this error path
    }
  }
  if (ctrl_ != MPI_COMM_NULL) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&ctrl_);
  }
}

NcclTransport::Edge& NcclTransport::out_edge(int peer, const char* op) {
  auto it = out_.find(peer);
  if (it == out_.end()) {
    throw Error(std::string("NCCL transport: ") + op + " from rank " + std::to_string(rank_) + " to rank " +
                std::to_string(peer) + ", which is not one of its peers (set at construction)");
  }
  return it->second;
}

NcclTransport::Edge& NcclTransport::in_edge(int peer, const char* op) {
  auto it = in_.find(peer);
  if (it == in_.end()) {
    throw Error(std::string("NCCL transport: ") + op + " on rank " + std::to_string(rank_) + " from rank " +
                std::to_string(peer) + ", which is not one of its peers (set at construction)");
  }
  return it->second;
}

TransferId NcclTransport::post_send(int peer, int tag, const void* data, std::size_t bytes) {
  Edge& e = out_edge(peer, "post_send");
  const TransferId id = next_++;
  Transfer t;
  t.send = true;
  t.peer = peer;
  t.tag = tag;
  t.data = const_cast<void*>(data);
  t.bytes = bytes;
  t.ready = events_.take();
  cudaCheck(cudaEventRecord(t.ready, compute_));
  // Announce first: the receiver issues its ncclRecv only for announced sends.
  auto ann = std::make_unique<Announcement>(Announcement{tag, static_cast<long long>(bytes)});
  MPI_Request req;
  mpi_check(MPI_Isend(ann.get(), 2, MPI_LONG_LONG, peer, kCtrlTag, ctrl_, &req), "MPI_Isend (announcement)");
  ctrl_sends_.emplace_back(req, std::move(ann));
  cudaCheck(cudaStreamWaitEvent(e.stream, t.ready, 0));
  if (bytes > 0) ncclCheck(ncclSend(data, bytes, ncclChar, 1, e.comm, e.stream));
  t.done = events_.take();
  cudaCheck(cudaEventRecord(t.done, e.stream));
  transfers_.emplace(id, t);
  progress();
  return id;
}

TransferId NcclTransport::post_recv(int peer, int tag, void* data, std::size_t bytes) {
  Edge& e = in_edge(peer, "post_recv");
  progress();  // an announcement already here may have been staged
  const TransferId id = next_++;
  Transfer t;
  t.peer = peer;
  t.tag = tag;
  t.data = data;
  t.bytes = bytes;
  t.ready = events_.take();
  cudaCheck(cudaEventRecord(t.ready, compute_));
  auto& staged = unexpected_[peer][tag];
  if (!staged.empty()) {
    // The data arrived (or is arriving) in a staging buffer: copy it out on the edge stream, which orders the
    // copy after the staging ncclRecv, and after the compute work queued before this call.
    const Unexpected u = staged.front();
    staged.pop_front();
    if (staged.empty()) unexpected_[peer].erase(tag);
    if (u.bytes != bytes) {
      throw Error("NCCL transport: rank " + std::to_string(rank_) + " posted a receive of " + std::to_string(bytes) +
                  " bytes with tag " + std::to_string(tag) + " from rank " + std::to_string(peer) + ", which sent " +
                  std::to_string(u.bytes) + " bytes with that tag");
    }
    cudaCheck(cudaStreamWaitEvent(e.stream, t.ready, 0));
    if (bytes > 0) {
      cudaCheck(cudaMemcpyAsync(data, u.staging, bytes, cudaMemcpyDeviceToDevice, e.stream));
      cudaCheck(cudaFreeAsync(u.staging, e.stream));
    }
    t.done = events_.take();
    cudaCheck(cudaEventRecord(t.done, e.stream));
  } else {
    unexpected_[peer].erase(tag);
    posted_recvs_[peer][tag].push_back(id);
  }
  transfers_.emplace(id, t);
  return id;
}

void NcclTransport::progress() {
  while (!ctrl_sends_.empty()) {
    int flag = 0;
    mpi_check(MPI_Test(&ctrl_sends_.front().first, &flag, MPI_STATUS_IGNORE), "MPI_Test (announcement)");
    if (!flag) break;
    ctrl_sends_.pop_front();
  }
  for (auto& [peer, edge] : in_) {
    // MPI keeps messages of one sender on one communicator and tag in order: the announcements arrive in the
    // order of the sender's ncclSend calls, which is the order its edge queue runs them, and each is answered
    // by one ncclRecv on our side of the edge right away, so both queues hold the same sequence.
    while (true) {
      int flag = 0;
      mpi_check(MPI_Iprobe(peer, kCtrlTag, ctrl_, &flag, MPI_STATUS_IGNORE), "MPI_Iprobe");
      if (!flag) break;
      Announcement a{};
      mpi_check(MPI_Recv(&a, 2, MPI_LONG_LONG, peer, kCtrlTag, ctrl_, MPI_STATUS_IGNORE), "MPI_Recv (announcement)");
      const int tag = static_cast<int>(a.tag);
      const auto bytes = static_cast<std::size_t>(a.bytes);
      auto& by_tag = posted_recvs_[peer];
      auto it = by_tag.find(tag);
      if (it == by_tag.end()) {  // not posted yet: receive into a staging buffer
        Unexpected u;
        u.bytes = bytes;
        if (bytes > 0) {
          cudaCheck(cudaMallocAsync(&u.staging, bytes, edge.stream));
          ncclCheck(ncclRecv(u.staging, bytes, ncclChar, 0, edge.comm, edge.stream));
        }
        unexpected_[peer][tag].push_back(u);
        continue;
      }
      const TransferId id = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) by_tag.erase(it);
      Transfer& t = transfers_.at(id);
      if (t.bytes != bytes) {
        throw Error("NCCL transport: rank " + std::to_string(rank_) + " posted a receive of " +
                    std::to_string(t.bytes) + " bytes with tag " + std::to_string(tag) + " from rank " +
                    std::to_string(peer) + ", which sends " + std::to_string(bytes) + " bytes with that tag");
      }
      cudaCheck(cudaStreamWaitEvent(edge.stream, t.ready, 0));
      if (bytes > 0) ncclCheck(ncclRecv(t.data, bytes, ncclChar, 0, edge.comm, edge.stream));
      t.done = events_.take();
      cudaCheck(cudaEventRecord(t.done, edge.stream));
    }
  }
}

void NcclTransport::check_async_errors() {
  for (auto* edges : {&out_, &in_}) {
    for (auto& [peer, e] : *edges) {
      ncclResult_t r = ncclSuccess;
      ncclCheck(ncclCommGetAsyncError(e.comm, &r));
      if (r != ncclSuccess && r != ncclInProgress) {
        throw Error("NCCL transport: the communicator between rank " + std::to_string(rank_) + " and rank " +
                    std::to_string(peer) + " failed: " + ncclGetErrorString(r));
      }
    }
  }
}

bool NcclTransport::finished(TransferId, Transfer& t) { return t.done && event_done(t.done); }

void NcclTransport::release(TransferId id) {
  auto it = transfers_.find(id);
  events_.give(it->second.ready);
  if (it->second.done) events_.give(it->second.done);
  transfers_.erase(it);
}

bool NcclTransport::test(TransferId id) {
  progress();
  auto it = transfers_.find(id);
  if (it == transfers_.end()) return true;
  if (!finished(id, it->second)) return false;
  release(id);
  return true;
}

std::vector<TransferId> NcclTransport::poll() {
  progress();
  std::vector<TransferId> done;
  for (auto& [id, t] : transfers_) {
    if (finished(id, t)) done.push_back(id);
  }
  for (TransferId id : done) release(id);
  return done;
}

std::vector<TransferId> NcclTransport::wait_some() {
  Backoff backoff;
  for (long i = 0; !transfers_.empty(); i++) {
    auto done = poll();
    if (!done.empty()) return done;
    if (i % 256 == 255) check_async_errors();  // a failed peer would otherwise leave us waiting forever
    backoff.pause();
  }
  return {};
}

}  // namespace conductor::runtime

#endif  // CONDUCTOR_HAVE_CUDA
