#include "conductor/runtime/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>

#include "conductor/runtime/control_plane.hpp"
#include "conductor/runtime/migration_peer.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::runtime {

Executor::Executor(int rank, Transport& control, Transport& data, Compute& compute, const CommonClock& clock,
                   const sim::NoiseModel& noise, ExecutorOptions options)
    : rank_(rank),
      control_(control),
      data_(data),
      compute_(compute),
      clock_(clock),
      noise_(noise),
      options_(options),
      watchdog_(options.watchdog_s, rank) {}

Executor::Awaited Executor::describe_wait(const sched::Schedule& order, const sched::Arbiter& state,
                                          const ControlPlane& plane, int step) const {
  const auto& actions = order.ranks[static_cast<std::size_t>(rank_)];
  const int n = static_cast<int>(actions.size());
  // The op strict execution runs next if it waits for an input, else the first waiting one in list order.
  int waiting = -1;
  for (int k = 0; k <= n && waiting < 0; ++k) {
    const int i = k == 0 ? state.next_in_list() : k - 1;
    if (i < 0 || i >= n || state.is_started(i) || plane.arrived(i)) continue;
    const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(i)]);
    if (in && !in->local()) waiting = i;
  }
  // Steps as the step lines count them, from 1.
  if (waiting < 0) return {"any input of step " + std::to_string(step + 1) + " (none outstanding)", -1};
  const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(waiting)]);
  const bool activation = in->payload == sched::Payload::Activation;
  return {std::string(activation ? "the activation of " : "the gradient of ") + std::to_string(in->from_chunk) +
              (activation ? "F" : "B") + std::to_string(in->microbatch) + " from rank " +
              std::to_string(in->from_rank) + " (stage " + std::to_string(in->from_stage) + ", step " +
              std::to_string(step + 1) + ")",
          in->from_rank};
}

double Executor::comm_estimate_ns() const {
  // Emulated transfers take the cost model's time (injected); a real transfer's own time is not estimated.
  return options_.inject_full_comm_time ? noise_.cost().comm_time() * 1e6 : 0.0;
}

double Executor::injected_comm_ms(int step, const sched::Transfer& t) const {
  const double total = noise_.comm_time_ms(step, t);
  if (options_.inject_full_comm_time) return total;
  // Real transfers already take their real time; only the noise model's extra delay is injected.
  return std::max(0.0, total - noise_.cost().comm_time());
}

// One step on this rank: the ops' lifecycle (launch, retire, their buffers and sends) and the loop that polls,
// serves helps, launches what the driver picks and waits; the messages live in the ControlPlane, migration in
// the MigrationPeer.
class Executor::Step {
 public:
  Step(Executor& ex, int step, const sched::Schedule& order);
  StepOutcome run();

 private:
  std::size_t drain();
  std::size_t drain_until_quiet();
  void on_completion(const Completion& c);
  void send_finished(int i, std::int64_t now);
  const float* input_of(int i) const;
  void release_input(int i);
  void launch(int i);
  void retire();
  std::int64_t record_op(int i, const OpSpan& span);
  void post_output(int i, std::int64_t end);
  void wait_idle();
  void debug_idle_report();
  void drain_sends();
  std::size_t at(int i) const { return static_cast<std::size_t>(i); }

  Executor& ex_;
  const sched::Schedule& order_;
  const std::vector<sched::Action>& actions_;
  const bool migrating_;
  const bool announcing_;  // backfill: estimates from the previous step's measured durations, and announcements
  const bool announce_inputs_;
  sched::DriverOptions dopt_;
  sched::RankDriver driver_;
  StepContext ctx_;
  ControlPlane plane_;
  std::unique_ptr<MigrationPeer> migration_;
  sched::MeasuredDurations measuring_;
  const bool has_payload_;
  const std::size_t payload_bytes_;
  const bool early_sends_;
  const int depth_;
  const std::int64_t bytes_;
  const bool debug_idle_;  // CONDUCTOR_DEBUG_IDLE: a rank idle for seconds says why (read once, not per poll)
  // Per action: the buffers of its input and output, its ticket while launched, its span and whether it finished.
  std::vector<float*> in_buf_, out_buf_;
  std::vector<OpTicket> ticket_;
  std::vector<OpSpan> own_span_;
  std::vector<char> own_done_;
  std::vector<std::int64_t> early_send_done_;            // a queued-early send seen complete before its producer
  std::vector<int> in_flight_;                           // launched, unfinished, in launch order
  std::unordered_map<int, trace::OpEvent> send_events_;  // by producing action
  std::int64_t seen_progress_ = 0;
  std::int64_t idle_sleep_ns_ = 5'000;
  Watchdog::Timer quiet_;
};

sched::DriverOptions driver_options(const ExecutorOptions& options, const sim::NoiseModel& noise,
                                    const sched::MeasuredDurations& measured, bool migrating) {
  sched::DriverOptions dopt;
  dopt.execution = options.execution;
  dopt.hint = options.hint;
  dopt.wide_spread = options.wide_spread;
  dopt.memory_limit = options.memory_limit;
  dopt.memory_after_b = options.memory_after_b;
  if (dopt.execution == sched::Execution::Readiness && dopt.hint == sched::Hint::Backfill) {
    dopt.estimate = measured.estimate();
    // The congestion this runtime injects, as the simulator passes it. Not measured: on host backends an input
    // that arrives while an op runs is seen after it, and MPI's sends progress only between ops, so arrivals
    // strayed from their announcements by whole ops without any congestion (p = 4 zb-h1, 10% jitter: 0.96x).
    dopt.arrival_spread = noise.arrival_spread();
    // A late input comes that much late, as the simulator's drivers know: without it a rank whose input was late
    // stayed idle where the simulator's backfilled until then (emulated zb-h1, congestion p 0.15 of 25 ms).
    dopt.late_delay = noise.congestion_delay_ms();
    dopt.spread = measured.spread();  // as the simulator passes its noise's spread: backfill with probability
  }
  if (migrating) dopt.migration = options.migration;
  return dopt;
}

Executor::Step::Step(Executor& ex, int step, const sched::Schedule& order)
    : ex_(ex),
      order_(order),
      actions_(order.ranks[static_cast<std::size_t>(ex.rank_)]),
      migrating_(ex.options_.migration.enabled() && order.p > 1),
      announcing_(ex.options_.execution == sched::Execution::Readiness && ex.options_.hint == sched::Hint::Backfill),
      announce_inputs_(announcing_ || migrating_),  // migration announces with the cost model's estimate
      dopt_(driver_options(ex.options_, ex.noise_, ex.measured_, migrating_)),
      driver_(order, ex.rank_, dopt_),
      ctx_(step, ex.rank_, order, driver_, 0),
      plane_(ctx_, ex.control_, ex.data_, ex.clock_, announce_inputs_, ex.options_.comm_events,
             ex.compute_.tensor_bytes()),
      has_payload_(ex.compute_.payload_floats() > 0),
      payload_bytes_(ex.compute_.payload_floats() * sizeof(float)),
      early_sends_(ex.data_.orders_after_compute()),
      depth_(std::max(1, ex.compute_.queue_depth())),
      bytes_(ex.compute_.tensor_bytes()),
      debug_idle_(std::getenv("CONDUCTOR_DEBUG_IDLE") != nullptr),
      in_buf_(actions_.size(), nullptr),
      out_buf_(actions_.size(), nullptr),
      ticket_(actions_.size(), -1),
      own_span_(actions_.size()),
      own_done_(actions_.size(), 0),
      early_send_done_(actions_.size(), -1),
      quiet_(ex.watchdog_, 0) {
  // The simulator delivers announcements after the cost model's comm time (sim::simulate), as transfers.
  plane_.hold_announcements(std::llround(ex_.comm_estimate_ns()));
  ex_.compute_.begin_step(step);
  ctx_.begin = ctx_.last_end = ex_.clock_.now_ns();
  driver_.begin(0.0);
  // Post every receive of the step now: arrival, not the list, decides when an op can run.
  for (int i = 0; i < static_cast<int>(actions_.size()); ++i) {
    const auto in = sched::input_of(order_, ex_.rank_, actions_[at(i)]);
    if (!in || in->local()) continue;
    if (has_payload_) in_buf_[at(i)] = ex_.compute_.take_buffer();
    plane_.expect_input(i, in_buf_[at(i)], payload_bytes_);
  }
  if (migrating_) {
    const sim::NoiseModel& noise = ex_.noise_;
    const int v = order_.v;
    migration_ = std::make_unique<MigrationPeer>(
        ctx_, plane_, ex_.compute_, ex_.clock_, ex_.options_, ex_.watchdog_,
        [this](bool data) { return plane_.poll([this](const Completion& c) { on_completion(c); }, data); },
        [&noise, v](int r, const sched::Action& a) { return noise.cost().op_time(r, a.kind, v); },
        ex_.comm_estimate_ns() / 1e6);
  }
}

std::size_t Executor::Step::drain() {
  return plane_.poll([this](const Completion& c) { on_completion(c); });
}

// Before each decision (poll_until_quiet): with one poll, readiness started a W ahead of the op it fed, for
// several ops in a row (a RECV seen 60 ms late; 0.97x of strict where the simulator, the same decisions on exact
// arrivals, gives 1.016x).
std::size_t Executor::Step::drain_until_quiet() {
  return poll_until_quiet([this] { return drain(); });
}

// A completion the control plane does not handle itself: migration's messages and the sends.
void Executor::Step::on_completion(const Completion& c) {
  switch (c.role) {
    case Role::Control:
    case Role::HelpPayload:
    case Role::HelpReply:
    case Role::HelpSend: migration_->handle(c, plane_.last_poll()); break;
    case Role::Header:
      if (!has_payload_) send_finished(c.action, plane_.last_poll());  // the header is the whole message
      break;
    case Role::Tensor:
      send_finished(c.action, plane_.last_poll());
      ex_.compute_.give_buffer(out_buf_[at(c.action)]);  // its producer finished before the send could complete
      out_buf_[at(c.action)] = nullptr;
      break;
    case Role::Announcement: break;
  }
}

void Executor::Step::send_finished(int i, std::int64_t now) {
  auto it = send_events_.find(i);
  if (it == send_events_.end()) {
    early_send_done_[at(i)] = now;
    return;
  }
  it->second.end_ns = now;
  if (ex_.options_.comm_events) ctx_.outcome.events.push_back(it->second);
  send_events_.erase(it);
}

// Action i's input: the local producer's output buffer, or the received one (nullptr without payloads).
const float* Executor::Step::input_of(int i) const {
  const auto in = sched::input_of(order_, ex_.rank_, actions_[at(i)]);
  if (!in || !has_payload_) return nullptr;
  return in->local() ? out_buf_[at(ctx_.producer_of(*in))] : in_buf_[at(i)];
}

// Action i's input is consumed: a received buffer, or the local producer's output buffer, goes back.
void Executor::Step::release_input(int i) {
  const auto in = sched::input_of(order_, ex_.rank_, actions_[at(i)]);
  if (!in || !has_payload_) return;
  float*& b = in->local() ? out_buf_[at(ctx_.producer_of(*in))] : in_buf_[at(i)];
  ex_.compute_.give_buffer(b);
  b = nullptr;
}

void Executor::Step::launch(int i) {
  const auto& a = actions_[at(i)];
  const auto out = sched::output_of(order_, ex_.rank_, a);
  const float* in_ptr = input_of(i);
  if (out && has_payload_) out_buf_[at(i)] = ex_.compute_.take_buffer();
  const std::int64_t now = ex_.clock_.now_ns();
  driver_.start(i, ctx_.since_begin(now));
  if (migration_) migration_->say_busy();
  // Migration decides and announces with the cost model's estimate, as the simulator does.
  const double model_ns = ex_.noise_.cost().op_time(ex_.rank_, a.kind, order_.v) * 1e6;
  double predicted = announcing_ ? dopt_.estimate(a) : migrating_ ? model_ns : 0.0;
  if (migration_) {
    predicted = migration_->offload(i, now, model_ns);
    migration_->push_sends();  // before this rank sleeps in its share
  }
  if (announce_inputs_ && out && !out->local()) {
    const double expected = static_cast<double>(now) + predicted + ex_.comm_estimate_ns();
    plane_.announce(i, *out, std::isfinite(expected) ? std::llround(expected) : kUnknown, now);
  }
  ticket_[at(i)] = ex_.compute_.launch(ctx_.step, a, order_.stage_of(ex_.rank_, a.chunk), in_ptr, out_buf_[at(i)]);
  in_flight_.push_back(i);
  ++ctx_.progress;
  // A device transport queues the send behind the producer now; the GPU sends as soon as the op is done.
  if (out && !out->local() && has_payload_ && early_sends_) {
    plane_.post_send(Plane::Data, out->to_rank, ControlPlane::tag_of(order_, *out), out_buf_[at(i)], payload_bytes_,
                     Role::Tensor, i);
  }
}

// Ops finish in launch order (one stream; host backends inside launch()), so they are retired in that order and
// the first unfinished one ends the pass: a later op seen finished first (its event completed between two
// queries) waits one pass, and trace events and wait times stay in device order.
void Executor::Step::retire() {
  while (!in_flight_.empty()) {
    const int i = in_flight_.front();
    if (!own_done_[at(i)]) {
      if (!ex_.compute_.finished(ticket_[at(i)], own_span_[at(i)])) break;
      own_done_[at(i)] = 1;
    }
    if (migration_) {
      if (migration_->answer_due(i)) break;  // the helper's part is not in yet
      migration_->finish(i, own_span_[at(i)]);
    }
    in_flight_.erase(in_flight_.begin());
    ++ctx_.progress;
    const std::int64_t end = record_op(i, own_span_[at(i)]);
    release_input(i);
    post_output(i, end);
  }
}

// The op's event (with a helper: from the decision to the answer) and its completion for the driver; returns
// its end.
std::int64_t Executor::Step::record_op(int i, const OpSpan& span) {
  static const MigrationPeer::Owned none;
  const MigrationPeer::Owned& own = migration_ ? migration_->owned(i) : none;
  const std::int64_t start = std::min(ex_.clock_.to_common(span.start_ns), own.decided_at);
  const std::int64_t end = std::max(ex_.clock_.to_common(span.end_ns), own.back);
  driver_.complete(i, ctx_.since_begin(end));
  const auto& a = actions_[at(i)];
  // The op's time alone (its share scaled back): what the next step's estimates expect.
  measuring_.add(a, static_cast<double>(span.end_ns - span.start_ns) / own.own_share);
  trace::OpEvent e;
  e.step = ctx_.step;
  e.rank = ex_.rank_;
  e.stage = order_.stage_of(ex_.rank_, a.chunk);
  e.chunk = a.chunk;
  e.microbatch = a.microbatch;
  e.kind = static_cast<trace::EventKind>(a.kind);
  e.ready_ns = std::min(ctx_.begin + static_cast<std::int64_t>(driver_.startable_at(i)), start);
  e.start_ns = start;
  e.end_ns = end;
  e.bytes = bytes_;
  e.wait_ns = std::max<std::int64_t>(0, start - ctx_.last_end);
  e.migrated = static_cast<std::int16_t>(own.slices);
  ctx_.record(e);
  return end;
}

// Action i ended at `end`: its output's header (and, on host transports, its tensor) go to the consumer.
void Executor::Step::post_output(int i, std::int64_t end) {
  const auto out = sched::output_of(order_, ex_.rank_, actions_[at(i)]);
  if (!out || out->local()) return;
  send_events_[i] = transfer_event(ctx_.step, ex_.rank_, trace::EventKind::SEND, *out, end, end, bytes_);
  if (early_send_done_[at(i)] >= 0) send_finished(i, std::max(end, early_send_done_[at(i)]));
  plane_.send_header(i, *out, end + trace::ms_to_ns(ex_.injected_comm_ms(ctx_.step, *out)));
  if (has_payload_ && !early_sends_) {
    plane_.post_send(Plane::Data, out->to_rank, ControlPlane::tag_of(order_, *out), out_buf_[at(i)], payload_bytes_,
                     Role::Tensor, i);
  }
}

void Executor::Step::debug_idle_report() {
  if (!debug_idle_ || ex_.clock_.now_ns() - ctx_.last_end <= 3'000'000'000LL) return;
  const sched::Arbiter& state = ctx_.state();
  std::string st;
  for (int k = 0; k < static_cast<int>(actions_.size()); ++k) {
    st += sched::to_string(actions_[at(k)]) +
          (state.is_done(k)      ? "d"
           : state.is_ready(k)   ? "r"
           : state.is_started(k) ? "s"
                                 : "-") +
          " ";
  }
  std::fprintf(stderr, "[rank %d] idle: next %d mem %.3f/%.3f pending %zu+%zu in flight %zu: %s\n", ex_.rank_,
               state.next_in_list(), state.memory_in_use(), state.memory_limit(), plane_.pending_control(),
               plane_.pending_data(), in_flight_.size(), st.c_str());
  ctx_.last_end = ex_.clock_.now_ns();
}

// Nothing to launch: tell the peers, watch the wait (only time with nothing moving, nothing of its own in flight
// and no injected delay pending counts), then yield or sleep until the next poll.
void Executor::Step::wait_idle() {
  if (migration_) migration_->say_idle(!in_flight_.empty());
  const std::int64_t polled = plane_.last_poll();
  if (ctx_.progress != seen_progress_ || !in_flight_.empty() || plane_.holds_delayed()) {
    seen_progress_ = ctx_.progress;
    quiet_.restart(polled);
  } else if (quiet_.expired(polled) || Watchdog::another_fired()) {
    const Awaited awaited = ex_.describe_wait(order_, ctx_.state(), plane_, ctx_.step);
    ex_.watchdog_.fire(awaited.what, quiet_.waited_s(polled), awaited.peer);
  }
  if (migration_) migration_->check_answers(in_flight_, polled);
  debug_idle_report();
  if (!ex_.options_.oversubscribed || !in_flight_.empty()) {
    // A core of its own (or a GPU op about to finish): poll without sleeping, so an arrival is seen within
    // microseconds.
    std::this_thread::yield();
    return;
  }
  // Many ranks per core: sleep between polls, backing off from 10 us to 400 us, so that idle ranks leave the
  // cores to those that compute.
  idle_sleep_ns_ = std::min<std::int64_t>(400'000, idle_sleep_ns_ * 2);
  const std::int64_t wake = std::min(ex_.clock_.now_ns() + idle_sleep_ns_, plane_.next_release());
  std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<std::int64_t>(0, wake - ex_.clock_.now_ns())));
}

// Sends must complete before their buffers are reused; receives are all done (every op ran).
void Executor::Step::drain_sends() {
  const std::int64_t drain_begin = ex_.clock_.now_ns();
  Watchdog::Timer draining(ex_.watchdog_, drain_begin);
  while (plane_.pending() > 0) {
    if (debug_idle_ && ex_.clock_.now_ns() - drain_begin > 3'000'000'000LL) {
      std::fprintf(stderr, "[rank %d] draining: pending %zu+%zu sends %zu\n", ex_.rank_, plane_.pending_control(),
                   plane_.pending_data(), send_events_.size());
    }
    drain();
    if (draining.expired(plane_.last_poll()) || Watchdog::another_fired()) {
      // Named: the ranks that fire agree on a silent one by whom each waited for (Watchdog::reporter).
      const std::vector<int> peers = plane_.pending_send_peers();
      std::string whom;
      for (const int q : peers) whom += (whom.empty() ? "" : ", ") + std::to_string(q);
      ex_.watchdog_.fire(std::string(peers.size() == 1 ? "rank " : "ranks ") + whom + " to take the last " +
                             std::to_string(plane_.pending()) + " messages it sent in step " +
                             std::to_string(ctx_.step),
                         draining.waited_s(plane_.last_poll()), peers.size() == 1 ? peers.front() : -1);
    }
    if (plane_.pending() > 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  for (float*& b : out_buf_) {
    if (b) ex_.compute_.give_buffer(b);  // outputs without a consumer on this rank (none in valid schedules)
    b = nullptr;
  }
}

StepOutcome Executor::Step::run() {
  quiet_.restart(ex_.clock_.now_ns());
  while (!driver_.finished() || (migration_ && !migration_->over())) {
    const std::size_t first = drain_until_quiet();
    retire();
    if (ex_.between_ops_) ex_.between_ops_();
    if (migration_ && migration_->serve()) {
      migration_->push_sends();  // the reply, before this rank sleeps in an op of its own
      continue;
    }
    // A help accepted while idle runs first: its payload is on its way.
    const bool help_first = migration_ && migration_->help_first();
    if (!driver_.finished() && !help_first && static_cast<int>(in_flight_.size()) < depth_) {
      const int i = driver_.next(driver_.latest());  // see RankDriver::latest: a replay makes the same choice
      if (i >= 0) {
        if (migration_ && migration_->catch_up(i, first)) continue;  // a help request came: it runs first
        idle_sleep_ns_ = 5'000;
        launch(i);
        continue;
      }
    }
    if (migration_ && migration_->catch_up(-1, first)) continue;
    wait_idle();
  }
  drain_sends();
  if (migration_) {
    ctx_.outcome.migration_control_ns += migration_->control_ns();
    ctx_.outcome.slices_given = migration_->slices_given();
    ctx_.outcome.migration_decisions = migration_->decisions();
    ctx_.outcome.migration_statuses = migration_->statuses_sent();
    ctx_.outcome.migration_declined = migration_->declined();
  }
  migration_.reset();  // its progress function refers to this step's state
  ctx_.outcome.peak_memory = ctx_.state().peak_memory();
  measuring_.carry_spread(ex_.measured_);  // the spread over every step so far
  ex_.measured_ = std::move(measuring_);
  return std::move(ctx_.outcome);
}

StepOutcome Executor::run_step(int step, const sched::Schedule& order) { return Step(*this, step, order).run(); }

}  // namespace conductor::runtime
