// The validation loss through the pipeline (evaluation.hpp).
#include "conductor/runtime/evaluation.hpp"

#include <string>
#include <vector>

#include "conductor/model/backend.hpp"

namespace conductor::runtime {

namespace {
constexpr int kEvalTag = 0x5e7a1;  // point-to-point on the training communicator, which carries only collectives
}

double pipeline_eval_loss(model::StageModel& model, const sched::Schedule& order, int rank, MPI_Comm comm, int batches,
                          const Watchdog& watchdog) {
  const int S = order.num_stages();
  const std::size_t n = model.activation_elements();
  model::Backend& backend = model.backend();
  model::DeviceBuffer in(backend, n * sizeof(float)), out(backend, n * sizeof(float));
  std::vector<float> host(n);
  const int count = static_cast<int>(n);
  double sum = 0.0;
  for (int b = 0; b < batches; b++) {
    for (int vs = 0; vs < S; vs++) {
      if (order.rank_of(vs) != rank) continue;
      const int from = vs == 0 ? rank : order.rank_of(vs - 1);
      if (from != rank) {
        MPI_Request r;
        MPI_Irecv(host.data(), count, MPI_FLOAT, from, kEvalTag, comm, &r);
        watchdog.wait(r,
                      "the activation of validation batch " + std::to_string(b) + " from rank " + std::to_string(from));
        backend.upload(in.get(), host.data(), n * sizeof(float));
      } else if (vs > 0) {
        backend.copy(in.get(), out.get(), n * sizeof(float));  // the previous stage ran here
      }
      const double loss = model.eval_forward(vs, b, vs == 0 ? nullptr : in.f(), vs == S - 1 ? nullptr : out.f());
      if (vs == S - 1) sum += loss;
      const int to = vs == S - 1 ? rank : order.rank_of(vs + 1);
      if (to != rank) {
        backend.download(host.data(), out.get(), n * sizeof(float));
        MPI_Request r;
        MPI_Isend(host.data(), count, MPI_FLOAT, to, kEvalTag, comm, &r);
        watchdog.wait(
            r, "rank " + std::to_string(to) + " to take the activation of validation batch " + std::to_string(b));
      }
    }
  }
  double loss = sum / batches;
  watched_bcast(watchdog, &loss, 1, MPI_DOUBLE, order.rank_of(S - 1), comm, "the validation loss");
  return loss;
}

}  // namespace conductor::runtime
