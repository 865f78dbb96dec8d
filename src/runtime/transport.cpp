#include "conductor/runtime/transport.hpp"

#include <algorithm>
#include <string>

#include "conductor/util/error.hpp"

namespace conductor::runtime {

namespace {
void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error(std::string("MPI transport: ") + what + " failed: " + std::string(text, len));
}
}  // namespace

MpiTransport::MpiTransport(MPI_Comm comm) : comm_(comm) {}

MpiTransport::~MpiTransport() {
  // Pending receives would write into freed buffers; cancel them (only reached on error paths).
  for (auto& r : requests_) {
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Request_free(&r);
    }
  }
}

TransferId MpiTransport::post_send(int peer, int tag, const void* data, std::size_t bytes) {
  MPI_Request r;
  check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r), "MPI_Isend");
  requests_.push_back(r);
  ids_.push_back(next_);
  return next_++;
}

TransferId MpiTransport::post_recv(int peer, int tag, void* data, std::size_t bytes) {
  MPI_Request r;
  check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &r), "MPI_Irecv");
  requests_.push_back(r);
  ids_.push_back(next_);
  return next_++;
}

bool MpiTransport::test(TransferId id) {
  auto it = std::find(ids_.begin(), ids_.end(), id);
  if (it == ids_.end()) return true;
  const auto i = static_cast<size_t>(it - ids_.begin());
  int done = 0;
  check(MPI_Test(&requests_[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
  if (done) {
    requests_.erase(requests_.begin() + static_cast<long>(i));
    ids_.erase(it);
  }
  return done != 0;
}

std::vector<TransferId> MpiTransport::collect(int completed, bool) {
  std::vector<TransferId> done;
  if (completed == MPI_UNDEFINED || completed <= 0) return done;
  std::vector<int> idx(indices_.begin(), indices_.begin() + completed);
  std::sort(idx.begin(), idx.end(), std::greater<int>());
  for (int i : idx) {
    done.push_back(ids_[static_cast<size_t>(i)]);
    requests_.erase(requests_.begin() + i);
    ids_.erase(ids_.begin() + i);
  }
  return done;
}

std::vector<TransferId> MpiTransport::poll() {
  if (requests_.empty()) return {};
  indices_.resize(requests_.size());
  int completed = 0;
  check(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &completed, indices_.data(),
                     MPI_STATUSES_IGNORE),
        "MPI_Testsome");
  return collect(completed, false);
}

std::vector<TransferId> MpiTransport::wait_some() {
  if (requests_.empty()) return {};
  indices_.resize(requests_.size());
  int completed = 0;
  check(MPI_Waitsome(static_cast<int>(requests_.size()), requests_.data(), &completed, indices_.data(),
                     MPI_STATUSES_IGNORE),
        "MPI_Waitsome");
  return collect(completed, true);
}

}  // namespace conductor::runtime
