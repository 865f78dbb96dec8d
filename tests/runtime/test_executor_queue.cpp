// The executor's device path without a device: a compute that behaves like a GPU stream (launch() returns at
// once; ops run one after another on their own timeline, 1 ms each; an op reads its input and writes its output
// when it runs, not when launched), queue depth 2, over real MPI transports. Proves, for schedules with remote
// and local (same-rank) transfers, that every op runs once, data flows through the pipeline intact (an input
// buffer is never reused or overwritten before its consumer ran, an output never travels before its producer
// ran), every payload buffer goes back to the pool, and the trace times are the device timeline's.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>

#include "conductor/config/deck.hpp"
#include "conductor/config/resolve.hpp"
#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/util/mpi.hpp"

namespace {

using namespace conductor;

constexpr std::size_t kFloats = 4;
constexpr std::int64_t kOpNs = 1'000'000;

// A stream of ops on the host steady clock. Values: an F of virtual stage s writes (mb*1000 + s + 1); the
// last stage's B starts the gradient chain at mb*1000 + 500 and each B adds one.
class QueuedCompute final : public runtime::Compute {
 public:
  QueuedCompute(int num_stages, int depth) : num_stages_(num_stages), depth_(depth) {}
  std::size_t payload_floats() const override { return kFloats; }
  std::int64_t tensor_bytes() const override { return kFloats * sizeof(float); }
  float* take_buffer() override {
    ++outstanding;
    if (free_.empty()) {
      owned_.emplace_back(kFloats, -1.0f);
      return owned_.back().data();
    }
    float* b = free_.back();
    free_.pop_back();
    std::fill(b, b + kFloats, -7.0f);  // a reused buffer holds garbage, as device memory would
    return b;
  }
  void give_buffer(float* b) override {
    if (!b) return;
    --outstanding;
    free_.push_back(b);
  }
  void begin_step(int) override {}
  runtime::OpTicket launch(int, const sched::Action& a, int stage, const float* in, float* out) override {
    Op op{a, stage, in, out, 0, 0};
    op.start = std::max(runtime::steady_now_ns(), queue_.empty() ? last_end_ : queue_.back().end);
    op.end = op.start + kOpNs;
    queue_.push_back(op);
    max_queued = std::max(max_queued, static_cast<int>(queue_.size()));
    return ++tickets_;
  }
  bool finished(runtime::OpTicket ticket, runtime::OpSpan& span) override {
    // In order, like a stream: ticket t is the (t - retired_)th queued op.
    const auto k = static_cast<std::size_t>(ticket - retired_ - 1);
    if (k >= queue_.size()) throw std::runtime_error("unknown ticket");
    if (runtime::steady_now_ns() < queue_[k].end) return false;
    while (retired_ < ticket && runtime::steady_now_ns() >= queue_.front().end) run_front(span);
    if (ticket <= retired_) {
      span = spans_[ticket];
      return true;
    }
    return false;
  }
  int queue_depth() const override { return depth_; }
  runtime::OpTicket launched() const { return tickets_; }
  runtime::OpTicket retired() const { return retired_; }
  double step_loss() const override { return 0; }
  bool has_loss() const override { return false; }
  double local_grad_sq_norm() const override { return 0; }
  void optimizer_step(double, int) override {}

  int outstanding = 0;
  int max_queued = 0;
  std::vector<std::string> problems;

 private:
  struct Op {
    sched::Action a;
    int stage;
    const float* in;
    float* out;
    std::int64_t start, end;
  };
  void run_front(runtime::OpSpan&) {
    const Op op = queue_.front();
    queue_.pop_front();
    const int mb = op.a.microbatch;
    const bool last = op.stage == num_stages_ - 1;
    auto expect = [&](float got, float want, const char* what) {
      if (got != want) {
        problems.push_back(std::string(what) + " of " + sched::to_string(op.a) + " on stage " +
                           std::to_string(op.stage) + ": " + std::to_string(got) + ", expected " +
                           std::to_string(want));
      }
    };
    if (op.a.kind == sched::OpKind::F) {
      if (op.stage > 0) expect(op.in ? op.in[0] : -1, static_cast<float>(mb * 1000 + op.stage), "input");
      if (!last) op.out[0] = static_cast<float>(mb * 1000 + op.stage + 1);
    } else if (op.a.kind == sched::OpKind::B || op.a.kind == sched::OpKind::BW) {
      const float chain = static_cast<float>(mb * 1000 + 500 + (num_stages_ - 1 - op.stage));
      if (!last) expect(op.in ? op.in[0] : -1, chain, "gradient");
      if (op.stage > 0) op.out[0] = chain + 1;
    }
    last_end_ = op.end;
    ++retired_;
    spans_[retired_] = {op.start, op.end};
  }
  int num_stages_;
  int depth_;
  std::deque<std::vector<float>> owned_;
  std::vector<float*> free_;
  std::deque<Op> queue_;
  std::map<runtime::OpTicket, runtime::OpSpan> spans_;
  std::int64_t last_end_ = 0;
  runtime::OpTicket tickets_ = 0, retired_ = 0;
};

// A data transport with a device transport's ordering (NCCL, host-staged): a send may be posted before its
// producer has run, and reads its buffer only once every op launched before the post has run. Sends wait
// here until then and go out over MPI; receives go out at once (the executor posts them into fresh buffers).
class StreamOrderedTransport final : public runtime::Transport {
 public:
  StreamOrderedTransport(MPI_Comm comm, const QueuedCompute& compute) : inner_(comm), compute_(compute) {}
  runtime::TransferId post_send(int peer, int tag, const void* data, std::size_t bytes) override {
    const runtime::TransferId id = next_++;
    waiting_.push_back({id, peer, tag, data, bytes, compute_.launched()});
    ++early_posts;
    release();
    return id;
  }
  runtime::TransferId post_recv(int peer, int tag, void* data, std::size_t bytes) override {
    const runtime::TransferId id = next_++;
    outer_of_[inner_.post_recv(peer, tag, data, bytes)] = id;
    return id;
  }
  bool test(runtime::TransferId) override { throw std::logic_error("not used by the executor"); }
  std::vector<runtime::TransferId> poll() override {
    release();
    std::vector<runtime::TransferId> done;
    for (runtime::TransferId inner : inner_.poll()) {
      done.push_back(outer_of_.at(inner));
      outer_of_.erase(inner);
    }
    return done;
  }
  std::vector<runtime::TransferId> wait_some() override { throw std::logic_error("not used by the executor"); }
  std::size_t pending() const override { return waiting_.size() + outer_of_.size(); }
  bool orders_after_compute() const override { return true; }

  int early_posts = 0;

 private:
  struct Waiting {
    runtime::TransferId id;
    int peer, tag;
    const void* data;
    std::size_t bytes;
    runtime::OpTicket after;  // every op launched before the post must have run
  };
  void release() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
      if (compute_.retired() < it->after) {
        ++it;
        continue;
      }
      outer_of_[inner_.post_send(it->peer, it->tag, it->data, it->bytes)] = it->id;
      it = waiting_.erase(it);
    }
  }
  runtime::MpiTransport inner_;
  const QueuedCompute& compute_;
  std::vector<Waiting> waiting_;
  std::map<runtime::TransferId, runtime::TransferId> outer_of_;
  runtime::TransferId next_ = 0;
};

// ((schedule kind, virtual chunks), data transport ordered after compute, queue depth, readiness hint); backfill
// adds announcements on the control transport, which must all be received within their step.
class ExecutorQueue
    : public ::testing::TestWithParam<std::tuple<std::tuple<std::string, int>, bool, int, sched::Hint>> {};

TEST_P(ExecutorQueue, DeviceLikeComputeRunsEveryOpWithIntactData) {
  const auto& [schedule, stream_ordered, depth, hint] = GetParam();
  const auto& [kind, v] = schedule;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  config::LoadOptions o;
  o.command = config::Command::Run;
  o.world_size = size;
  o.source_name = "executor_queue";
  o.overrides = {"backend=emulated",
                 "parallel.pipeline=" + std::to_string(size),
                 "parallel.virtual=" + std::to_string(v),
                 "parallel.microbatches=" + std::to_string(2 * size),
                 "schedule.kind=" + kind,
                 "schedule.execution=readiness",
                 "cost.forward=1",
                 "cost.backward_input=1",
                 "cost.backward_weight=1",
                 "cost.comm=0.01"};
  const config::Deck deck = config::parse_deck("", o);
  const sched::Schedule order = sched::make_schedule(config::resolve(deck));
  const sim::NoiseModel noise = sim::NoiseModel::from_plan(config::resolve(deck), order);
  const runtime::CommonClock clock(MPI_COMM_WORLD);
  runtime::ExecutorOptions eo;
  eo.execution = sched::Execution::Readiness;
  eo.hint = hint;
  eo.memory_limit = sched::memory_limit_for(config::resolve(deck), order);
  eo.memory_after_b = sched::CostModel(config::resolve(deck).costs).memory_after_b;
  eo.comm_events = true;
  mpi::DupComm control_comm(MPI_COMM_WORLD), data_comm(MPI_COMM_WORLD);
  QueuedCompute compute(order.num_stages(), depth);
  runtime::MpiTransport control(control_comm.get());
  std::unique_ptr<runtime::Transport> data;
  StreamOrderedTransport* ordered = nullptr;
  if (stream_ordered) {
    auto t = std::make_unique<StreamOrderedTransport>(data_comm.get(), compute);
    ordered = t.get();
    data = std::move(t);
  } else {
    data = std::make_unique<runtime::MpiTransport>(data_comm.get());
  }
  runtime::Executor executor(rank, control, *data, compute, clock, noise, eo);
  for (int step = 0; step < 2; ++step) {
    const runtime::StepOutcome out = executor.run_step(step, order);
    EXPECT_EQ(control.pending(), 0u) << "every header and announcement of the step was received";
    std::multiset<std::string> ran;
    std::int64_t prev_end = 0;
    int sends = 0, recvs = 0;
    for (const auto& e : out.events) {
      if (e.kind == trace::EventKind::SEND) {
        ++sends;
        continue;
      }
      if (e.kind == trace::EventKind::RECV) {
        ++recvs;
        continue;
      }
      if (e.kind == trace::EventKind::ANNOUNCE) continue;
      ran.insert(std::to_string(static_cast<int>(e.kind)) + ":" + std::to_string(e.chunk) + ":" +
                 std::to_string(e.microbatch));
      EXPECT_EQ(e.end_ns - e.start_ns, kOpNs) << "op times are the device timeline's";
      EXPECT_GE(e.start_ns, prev_end) << "one stream: ops never overlap";
      prev_end = e.end_ns;
    }
    const auto& actions = order.ranks[static_cast<std::size_t>(rank)];
    EXPECT_EQ(ran.size(), actions.size()) << kind << " rank " << rank;
    for (const auto& a : actions) {
      EXPECT_EQ(ran.count(std::to_string(static_cast<int>(a.kind)) + ":" + std::to_string(a.chunk) + ":" +
                          std::to_string(a.microbatch)),
                1u);
    }
    int remote = 0;
    for (const auto& a : actions) {
      const auto in = sched::input_of(order, rank, a);
      if (in && !in->local()) ++remote;
    }
    EXPECT_EQ(recvs, remote);
    // Backfill: in the second step (the first has no measured estimates) every remote input was announced.
    EXPECT_EQ(out.announcements, hint == sched::Hint::Backfill && step > 0 ? remote : 0) << kind << " step " << step;
    EXPECT_EQ(compute.outstanding, 0) << "every payload buffer went back to the pool";
  }
  // The executor fills the queue up to the depth, never beyond (depth 1: the arbiter picks when the device is
  // free, as in the simulator).
  EXPECT_LE(compute.max_queued, depth);
  // Greedy readiness had ready ops to fill two slots; backfilling keeps to the list, which may leave one.
  if (hint == sched::Hint::Schedule) {
    EXPECT_GE(compute.max_queued, std::min(depth, 2)) << "ready ops were there to fill two slots";
  }
  if (ordered) {
    int remote_outputs = 0;
    for (const auto& a : order.ranks[static_cast<std::size_t>(rank)]) {
      const auto out = sched::output_of(order, rank, a);
      if (out && !out->local()) ++remote_outputs;
    }
    EXPECT_EQ(ordered->early_posts, 2 * remote_outputs) << "every send was posted at launch, before its producer ran";
  }
  for (const auto& p : compute.problems) ADD_FAILURE() << kind << " rank " << rank << ": " << p;
}

INSTANTIATE_TEST_SUITE_P(Schedules, ExecutorQueue,
                         ::testing::Combine(::testing::Values(std::make_tuple(std::string("zb-2p"), 1),
                                                              std::make_tuple(std::string("1f1b"), 1),
                                                              std::make_tuple(std::string("1f1b-interleaved"), 2),
                                                              std::make_tuple(std::string("zb-v"), 2)),
                                            ::testing::Bool(), ::testing::Values(1, 2, 3),
                                            ::testing::Values(sched::Hint::Schedule, sched::Hint::Backfill)),
                         [](const auto& info) {
                           std::string n = std::get<0>(std::get<0>(info.param));
                           for (auto& c : n) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n + (std::get<1>(info.param) ? "_stream_ordered" : "_host") + "_depth" +
                                  std::to_string(std::get<2>(info.param)) +
                                  (std::get<3>(info.param) == sched::Hint::Backfill ? "_backfill" : "");
                         });

}  // namespace
