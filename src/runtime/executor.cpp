#include "conductor/runtime/executor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <queue>
#include <thread>
#include <unordered_map>

#include "conductor/util/error.hpp"

namespace conductor::runtime {

namespace {

constexpr std::size_t kHeaderFloats = 4;  // 16 bytes: int64 ready_at_ns, int64 reserved

std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

std::int64_t read_stamp(const std::vector<float>& buf) {
  std::int64_t v = 0;
  std::memcpy(&v, buf.data(), sizeof v);
  return v;
}

void write_stamp(std::vector<float>& buf, std::int64_t v) { std::memcpy(buf.data(), &v, sizeof v); }

// A SEND (on the producing rank) or RECV (on the consuming rank) event of one transfer.
trace::OpEvent transfer_event(int step, int rank, trace::EventKind kind, const sched::Transfer& t, std::int64_t start,
                              std::int64_t end, std::int64_t bytes) {
  const bool recv = kind == trace::EventKind::RECV;
  trace::OpEvent e;
  e.step = step;
  e.rank = rank;
  e.stage = recv ? t.to_stage : t.from_stage;
  e.chunk = recv ? t.to_chunk : t.from_chunk;
  e.microbatch = t.microbatch;
  e.kind = kind;
  e.ready_ns = start;
  e.start_ns = start;
  e.end_ns = end;
  e.bytes = bytes;
  e.peer = recv ? t.from_rank : t.to_rank;
  return e;
}

}  // namespace

Executor::Executor(int rank, Transport& transport, Compute& compute, const CommonClock& clock,
                   const sim::NoiseModel& noise, ExecutorOptions options)
    : rank_(rank), transport_(transport), compute_(compute), clock_(clock), noise_(noise), options_(options) {}

int Executor::tag_of(const sched::Schedule& s, const sched::Transfer& t) const {
  // Unique per (direction, receiving stage, microbatch) within a step; steps never overlap because every
  // receive of a step completes before the step ends.
  return (static_cast<int>(t.payload) * s.num_stages() + t.to_stage) * s.m + t.microbatch;
}

double Executor::injected_comm_ms(int step, const sched::Transfer& t) const {
  const double total = noise_.comm_time_ms(step, t);
  if (options_.inject_full_comm_time) return total;
  // Real transfers already take their real time; only the noise model's extra delay is injected.
  return std::max(0.0, total - noise_.cost().comm_time());
}

StepOutcome Executor::run_step(int step, const sched::Schedule& order) {
  const auto& actions = order.ranks[static_cast<std::size_t>(rank_)];
  const int n = static_cast<int>(actions.size());
  sched::RankState state(order, rank_, options_.memory_limit, options_.memory_after_b);
  compute_.begin_step(step);

  const std::size_t msg_floats = kHeaderFloats + compute_.payload_floats();
  // in_buf[i]: the received input of action i; out_buf[i]: the output it produces (kept until sent).
  std::vector<std::vector<float>> in_buf(static_cast<std::size_t>(n)), out_buf(static_cast<std::size_t>(n));
  std::vector<std::int64_t> ready_ns(static_cast<std::size_t>(n), -1);
  std::vector<std::int64_t> recv_posted_ns(static_cast<std::size_t>(n), 0);
  std::unordered_map<TransferId, int> recv_of;  // transfer -> consumer action index
  std::unordered_map<TransferId, trace::OpEvent> send_events;

  StepOutcome outcome;
  // Diagnostics for a rank that sits idle for seconds (a schedule or transport bug): read once, not per poll.
  const bool debug_idle = std::getenv("CONDUCTOR_DEBUG_IDLE") != nullptr;
  const std::int64_t step_begin = clock_.now_ns();

  // Post every receive of the step now: arrival, not the list, decides when an op can run.
  for (int i = 0; i < n; ++i) {
    const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(i)]);
    if (!in || in->local()) continue;
    in_buf[static_cast<std::size_t>(i)].assign(msg_floats, 0.0f);
    const TransferId id = transport_.post_recv(in->from_rank, tag_of(order, *in), in_buf[static_cast<std::size_t>(i)].data(),
                                               msg_floats * sizeof(float));
    recv_of[id] = i;
    recv_posted_ns[static_cast<std::size_t>(i)] = step_begin;
  }

  // Inputs that arrived before their injected ready time wait here: (ready_at, action index).
  using Delayed = std::pair<std::int64_t, int>;
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<Delayed>> delayed;
  std::int64_t last_end = step_begin;
  const std::int64_t bytes = compute_.tensor_bytes();

  auto note_newly_ready = [&](std::int64_t now) {
    for (int i : state.take_newly_ready()) ready_ns[static_cast<std::size_t>(i)] = now;
  };
  // Input i is usable from `at` on (its arrival, or the injected ready time stamped by the sender).
  auto accept = [&](int i, std::int64_t at) {
    state.input_arrived(i);
    if (options_.comm_events) {
      const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(i)]);
      outcome.events.push_back(transfer_event(step, rank_, trace::EventKind::RECV, *in,
                                              recv_posted_ns[static_cast<std::size_t>(i)], at, bytes));
    }
  };
  auto arrived = [&](int i, std::int64_t now) {
    const std::int64_t ready_at = read_stamp(in_buf[static_cast<std::size_t>(i)]);
    if (ready_at > now) {
      delayed.emplace(ready_at, i);
    } else {
      accept(i, now);
    }
  };
  auto drain = [&](const std::vector<TransferId>& done) {
    const std::int64_t now = clock_.now_ns();
    for (TransferId id : done) {
      if (auto it = recv_of.find(id); it != recv_of.end()) {
        arrived(it->second, now);
        recv_of.erase(it);
      } else if (auto s = send_events.find(id); s != send_events.end()) {
        s->second.end_ns = now;
        if (options_.comm_events) outcome.events.push_back(s->second);
        send_events.erase(s);
      }
    }
    while (!delayed.empty() && delayed.top().first <= now) {
      accept(delayed.top().second, delayed.top().first);
      delayed.pop();
    }
    note_newly_ready(now);
  };

  note_newly_ready(step_begin);
  std::int64_t idle_sleep_ns = 5'000;
  while (!state.finished()) {
    drain(transport_.poll());
    const int i = state.pick(options_.execution, options_.hint);
    if (i < 0) {
      if (debug_idle && clock_.now_ns() - last_end > 3'000'000'000LL) {
        std::string st;
        for (int k = 0; k < n; ++k) {
          st += sched::to_string(actions[static_cast<std::size_t>(k)]) + (state.is_done(k) ? "d" : state.is_ready(k) ? "r" : state.is_started(k) ? "s" : "-") + " ";
        }
        std::fprintf(stderr, "[rank %d] idle: next %d mem %.3f/%.3f pending %zu: %s\n", rank_, state.next_in_list(), state.memory_in_use(), state.memory_limit(), transport_.pending(), st.c_str());
        last_end = clock_.now_ns();
      }
      // Idle: nothing ready (or strict's next op not ready). Sleep between polls, backing off from 10 us to
      // 400 us, so that idle ranks (many per core when oversubscribed) leave the cores to those that compute.
      if (!options_.oversubscribed) {
        // A core of its own: poll without sleeping, so an arrival is seen within microseconds.
        std::this_thread::yield();
        continue;
      }
      idle_sleep_ns = std::min<std::int64_t>(400'000, idle_sleep_ns * 2);
      std::int64_t wake = clock_.now_ns() + idle_sleep_ns;
      if (!delayed.empty()) wake = std::min(wake, delayed.top().first);
      std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<std::int64_t>(0, wake - clock_.now_ns())));
      continue;
    }
    idle_sleep_ns = 5'000;
    const auto& a = actions[static_cast<std::size_t>(i)];
    const int stage = order.stage_of(rank_, a.chunk);
    const auto in = sched::input_of(order, rank_, a);
    const auto out = sched::output_of(order, rank_, a);
    const float* in_ptr = nullptr;
    if (in) {
      if (in->local()) {
        // The producer ran on this rank: its output buffer is this op's input.
        const int producer = in->payload == sched::Payload::Activation
                                 ? state.index_of(sched::OpKind::F, in->from_chunk, in->microbatch)
                                 : state.backward_index(in->from_chunk, in->microbatch);
        in_ptr = out_buf[static_cast<std::size_t>(producer)].data() + kHeaderFloats;
      } else {
        in_ptr = in_buf[static_cast<std::size_t>(i)].data() + kHeaderFloats;
      }
    }
    float* out_ptr = nullptr;
    if (out) {
      out_buf[static_cast<std::size_t>(i)].assign(msg_floats, 0.0f);
      out_ptr = out_buf[static_cast<std::size_t>(i)].data() + kHeaderFloats;
    }
    if (compute_.payload_floats() == 0) {
      in_ptr = nullptr;  // emulated: stand-ins carry no tensor
      out_ptr = nullptr;
    }

    state.start(i);
    const std::int64_t start = clock_.now_ns();
    compute_.run(step, a, stage, in_ptr, out_ptr);
    const std::int64_t end = clock_.now_ns();
    state.complete(i);

    trace::OpEvent e;
    e.step = step;
    e.rank = rank_;
    e.stage = stage;
    e.chunk = a.chunk;
    e.microbatch = a.microbatch;
    e.kind = static_cast<trace::EventKind>(a.kind);
    e.ready_ns = ready_ns[static_cast<std::size_t>(i)] >= 0 ? ready_ns[static_cast<std::size_t>(i)] : start;
    e.start_ns = start;
    e.end_ns = end;
    e.bytes = bytes;
    e.wait_ns = start - last_end;
    outcome.events.push_back(e);
    last_end = end;

    if (out && !out->local()) {
      auto& buf = out_buf[static_cast<std::size_t>(i)];
      write_stamp(buf, end + ms_to_ns(injected_comm_ms(step, *out)));
      const TransferId id = transport_.post_send(out->to_rank, tag_of(order, *out), buf.data(), buf.size() * sizeof(float));
      send_events[id] = transfer_event(step, rank_, trace::EventKind::SEND, *out, end, end, bytes);
    }
    note_newly_ready(end);
  }
  // Sends must complete before their buffers go away; receives are all done (every op ran).
  const std::int64_t drain_begin = clock_.now_ns();
  while (transport_.pending() > 0) {
    if (debug_idle && clock_.now_ns() - drain_begin > 3'000'000'000LL) {
      std::fprintf(stderr, "[rank %d] draining: pending %zu recvs %zu sends %zu\n", rank_, transport_.pending(), recv_of.size(), send_events.size());
    }
    drain(transport_.poll());
    if (transport_.pending() > 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  outcome.peak_memory = state.peak_memory();
  return outcome;
}

}  // namespace conductor::runtime
