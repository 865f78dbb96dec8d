#include "conductor/runtime/executor.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>

#include "conductor/util/error.hpp"

namespace conductor::runtime {

namespace {

// The control plane's per-transfer message (see executor.hpp).
struct Header {
  std::int64_t ready_at_ns = 0;
  std::int64_t reserved = 0;
};

// The control plane's announcement (backfilling only; see executor.hpp): sent when the producing op starts.
struct Announcement {
  std::int64_t expected_ns = 0;  // when the input is expected to be usable; kUnknown when nothing was measured
  std::int64_t start_ns = 0;     // when the producing op started
};
constexpr std::int64_t kUnknown = INT64_MIN;

// Computation migration's control message (see executor.hpp), one tag per step, in order per pair of ranks.
enum class ControlKind : std::int64_t { Idle = 1, Busy = 2, Finished = 3, Help = 4, Declined = 5 };
struct Control {
  ControlKind kind = ControlKind::Busy;
  std::int64_t index = -1;           // Help, Declined: the op's position in the owner's list; Idle: the next op's
  std::int64_t slices = 0;           // Help
  std::int64_t help_ns = 0;          // Help: the slices' modelled time on the helper
  std::int64_t bytes_out = 0;        // Help: payload owner -> helper
  std::int64_t bytes_back = 0;       // Help: payload helper -> owner
  std::int64_t until_ns = kUnknown;  // Idle: announced arrival of the awaited input (kUnknown: none)
  std::int64_t producer = -1;        // Idle: the rank producing that input (-1: none)
};

// What an owner knows of a peer: its last status, and until when it helps this rank.
struct PeerView {
  ControlKind status = ControlKind::Busy;
  std::int64_t until_ns = kUnknown;
  int producer = -1;
  int next = -1;  // Idle: its next op's position in its list
  std::int64_t engaged_until = INT64_MIN;
};

// A help request on the helper: its payload, then its slices' work.
struct HelpJob {
  int owner = -1;
  Control request;
  std::vector<char> payload;
  bool payload_in = false;
  bool declined = false;  // it came while this rank ran its own ops: the payload goes straight back
  std::int64_t arrived = 0;
};

std::int64_t ms_to_ns(double ms) { return static_cast<std::int64_t>(std::llround(ms * 1e6)); }

// Fault tests: CONDUCTOR_INJECT_FAILURE=RANK:STEP:hang-help stops rank RANK (SIGSTOP) when it starts computing
// real slices for a peer in step STEP, so that peer's answer never comes (training.cpp reads the other forms).
bool hangs_helping(int rank, int step) {
  const char* env = std::getenv("CONDUCTOR_INJECT_FAILURE");
  int r = -1, s = -1;
  char how[16] = {0};
  return env && std::sscanf(env, "%d:%d:%15s", &r, &s, how) == 3 && r == rank && s == step &&
         std::string(how) == "hang-help";
}

// A SEND (on the producing rank), RECV or ANNOUNCE (on the consuming rank) event of one transfer.
trace::OpEvent transfer_event(int step, int rank, trace::EventKind kind, const sched::Transfer& t, std::int64_t start,
                              std::int64_t end, std::int64_t bytes) {
  const bool recv = kind == trace::EventKind::RECV || kind == trace::EventKind::ANNOUNCE;  // the receiver's side
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
                                          const std::vector<char>& arrived, int step) const {
  const auto& actions = order.ranks[static_cast<std::size_t>(rank_)];
  const int n = static_cast<int>(actions.size());
  // The op strict execution runs next if it waits for an input, else the first waiting one in list order.
  int waiting = -1;
  for (int k = 0; k <= n && waiting < 0; ++k) {
    const int i = k == 0 ? state.next_in_list() : k - 1;
    if (i < 0 || i >= n || state.is_started(i) || arrived[static_cast<std::size_t>(i)]) continue;
    const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(i)]);
    if (in && !in->local()) waiting = i;
  }
  if (waiting < 0) return {"any input of step " + std::to_string(step) + " (none outstanding)", -1};
  const auto in = sched::input_of(order, rank_, actions[static_cast<std::size_t>(waiting)]);
  const bool activation = in->payload == sched::Payload::Activation;
  return {std::string(activation ? "the activation of " : "the gradient of ") + std::to_string(in->from_chunk) +
              (activation ? "F" : "B") + std::to_string(in->microbatch) + " from rank " +
              std::to_string(in->from_rank) + " (stage " + std::to_string(in->from_stage) + ", step " +
              std::to_string(step) + ")",
          in->from_rank};
}

int Executor::tag_of(const sched::Schedule& s, const sched::Transfer& t) const {
  // Unique per (direction, receiving stage, microbatch) within a step; steps never overlap because every
  // receive of a step completes before the step ends.
  return (static_cast<int>(t.payload) * s.num_stages() + t.to_stage) * s.m + t.microbatch;
}

int Executor::announce_tag_of(const sched::Schedule& s, const sched::Transfer& t) const {
  return 2 * s.num_stages() * s.m + tag_of(s, t);  // above every header tag
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

StepOutcome Executor::run_step(int step, const sched::Schedule& order) {
  const auto& actions = order.ranks[static_cast<std::size_t>(rank_)];
  const bool migrating = options_.migration.enabled() && order.p > 1;
  const int n = static_cast<int>(actions.size());
  const auto at = [](int i) { return static_cast<std::size_t>(i); };
  sched::DriverOptions dopt;
  dopt.execution = options_.execution;
  dopt.hint = options_.hint;
  dopt.memory_limit = options_.memory_limit;
  dopt.memory_after_b = options_.memory_after_b;
  // Backfilling estimates this step's ops by the previous step's measured durations, and producers announce
  // when each cross-rank input is expected.
  const bool announcing = options_.execution == sched::Execution::Readiness && options_.hint == sched::Hint::Backfill;
  if (announcing) {
    dopt.estimate = measured_.estimate();
    dopt.spread = measured_.spread();  // as the simulator passes its noise's spread: backfill with probability
  }
  if (migrating) dopt.migration = options_.migration;
  // Migration decides and announces with the cost model's estimate, as the simulator does.
  const auto model_ns = [&](const sched::Action& a) { return noise_.cost().op_time(rank_, a.kind, order.v) * 1e6; };
  const bool announce_inputs = announcing || migrating;
  sched::MeasuredDurations measuring;
  sched::RankDriver driver(order, rank_, dopt);
  const sched::Arbiter& state = driver.arbiter();
  compute_.begin_step(step);

  const bool has_payload = compute_.payload_floats() > 0;
  const std::size_t payload_bytes = compute_.payload_floats() * sizeof(float);
  const bool early_sends = data_.orders_after_compute();
  const int depth = std::max(1, compute_.queue_depth());
  const std::int64_t bytes = compute_.tensor_bytes();

  // Per action i: the header and tensor of its remote input, the buffers of its input and output, whether
  // each half of the input is in, when it became ready, its ticket while launched.
  std::vector<Header> in_header(at(n)), out_header(at(n));
  std::vector<Announcement> in_announce(at(n)), out_announce(at(n));
  std::vector<float*> in_buf(at(n), nullptr), out_buf(at(n), nullptr);
  std::vector<char> header_in(at(n), 0), tensor_in(at(n), 0);
  std::vector<OpTicket> ticket(at(n), -1);
  std::vector<int> in_flight;  // launched, unfinished, in launch order
  enum class Role { Header, Tensor, Announcement, Control, HelpPayload, HelpReply, HelpSend };
  struct Pending {
    Role role;
    int action;
    bool send;
  };
  std::unordered_map<TransferId, Pending> control_ids, data_ids;  // each transport numbers its own transfers
  std::unordered_map<int, trace::OpEvent> send_events;            // by producing action

  StepOutcome outcome;
  // The watchdog's inputs: a count of events that move the step on (an input half arriving, an op launched or
  // retired), the time of the last poll (drain reads the clock anyway) and since when nothing moved.
  std::int64_t progress = 0, seen_progress = 0;
  std::int64_t poll_now = 0;
  std::vector<char> arrived(at(n), 0);  // both halves of the input in (held or accepted)
  // Diagnostics for a rank that sits idle for seconds (a schedule or transport bug): read once, not per poll.
  const bool debug_idle = std::getenv("CONDUCTOR_DEBUG_IDLE") != nullptr;
  const bool hang_helping = hangs_helping(rank_, step);
  const std::int64_t step_begin = clock_.now_ns();
  // The driver's clock: ns since the step began, as a double (exact below 2^53 ns, about 104 days).
  const auto since_begin = [step_begin](std::int64_t t) { return static_cast<double>(t - step_begin); };
  driver.begin(0.0);

  // Post every receive of the step now: arrival, not the list, decides when an op can run.
  for (int i = 0; i < n; ++i) {
    const auto in = sched::input_of(order, rank_, actions[at(i)]);
    if (!in || in->local()) continue;
    const int tag = tag_of(order, *in);
    control_ids[control_.post_recv(in->from_rank, tag, &in_header[at(i)], sizeof(Header))] = {Role::Header, i, false};
    if (announce_inputs) {
      control_ids[control_.post_recv(in->from_rank, announce_tag_of(order, *in), &in_announce[at(i)],
                                     sizeof(Announcement))] = {Role::Announcement, i, false};
    }
    if (has_payload) {
      in_buf[at(i)] = compute_.take_buffer();
      data_ids[data_.post_recv(in->from_rank, tag, in_buf[at(i)], payload_bytes)] = {Role::Tensor, i, false};
    } else {
      tensor_in[at(i)] = 1;  // stand-ins: the header is the whole message
    }
  }

  // Inputs that arrived before their injected ready time wait here: (ready_at, action index).
  using Delayed = std::pair<std::int64_t, int>;
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<Delayed>> delayed;
  std::int64_t last_end = step_begin;

  // Input i is usable from `when` on: its arrival, or (held until then) the injected ready time stamped by the
  // sender. `when` is the time the driver learns of it, so a replay of the trace sees what the driver saw.
  auto accept = [&](int i, std::int64_t when) {
    driver.input_arrived(i, since_begin(when));
    if (options_.comm_events) {
      const auto in = sched::input_of(order, rank_, actions[at(i)]);
      outcome.events.push_back(transfer_event(step, rank_, trace::EventKind::RECV, *in, step_begin, when, bytes));
    }
  };
  auto half_arrived = [&](int i, Role role, std::int64_t now) {
    (role == Role::Header ? header_in : tensor_in)[at(i)] = 1;
    ++progress;
    if (!header_in[at(i)] || !tensor_in[at(i)]) return;
    arrived[at(i)] = 1;
    const std::int64_t ready_at = in_header[at(i)].ready_at_ns;
    if (ready_at > now) {
      delayed.emplace(ready_at, i);
    } else {
      accept(i, now);
    }
  };
  // An announcement of input i received at `now`: the driver learns when it is expected (when its producer
  // measured anything); a comm-event trace records it, so a replay feeds the same announcements.
  std::vector<char> announce_known(at(n), 0);
  auto announced = [&](int i, std::int64_t now) {
    const Announcement& a = in_announce[at(i)];
    if (a.expected_ns == kUnknown) return;
    announce_known[at(i)] = 1;
    driver.announce(i, since_begin(a.expected_ns), since_begin(now));
    ++outcome.announcements;
    if (options_.comm_events) {
      const auto in = sched::input_of(order, rank_, actions[at(i)]);
      trace::OpEvent e = transfer_event(step, rank_, trace::EventKind::ANNOUNCE, *in, a.start_ns, now, 0);
      e.ready_ns = a.expected_ns;
      outcome.events.push_back(e);
    }
  };
  // Computation migration's state (see executor.hpp). Tags: control above the announcements; payloads above
  // every tensor tag, out and back per owner's list position.
  const int control_tag = 4 * order.num_stages() * order.m;
  const auto help_tag = [&](std::int64_t index, bool back) {
    return 2 * order.num_stages() * order.m + 2 * static_cast<int>(index) + (back ? 1 : 0);
  };
  std::vector<Control> control_in(at(order.p));
  std::deque<Control> control_out;             // send buffers, alive until the step's sends drained
  std::deque<std::vector<char>> help_buffers;  // payloads sent (out or back), same
  std::vector<PeerView> peers(at(order.p));
  std::deque<HelpJob> jobs;                                    // requests to this rank, in arrival order
  std::vector<int> help_of(at(n), -1), help_slices(at(n), 0);  // the owner's side: helper, slices per action
  std::vector<double> own_share(at(n), 1.0);
  std::vector<std::int64_t> help_back(at(n), -1), help_bytes(at(n), 0);
  std::vector<std::vector<char>> reply_buf(at(n));
  std::vector<char> help_declined(at(n), 0);
  std::vector<std::int64_t> decided_at(at(n), INT64_MAX);  // a migrated op starts when the owner decides
  int peers_finished = 0;
  // While this rank sleeps in an op or a help, the help payloads it sent keep moving (set once drain exists).
  std::function<bool()> keep_moving;
  std::function<void()> push_help_sends;  // polls a moment for the help payloads this rank sent (set with drain)
  int help_sends = 0;                     // help payloads (out or back) posted and not yet complete
  int answers_due = 0;                    // helpers' answers this rank waits for
  Control sent_status;                    // the last status this rank sent
  bool finished_sent = false;
  auto post_control_recv = [&](int q) {
    control_ids[control_.post_recv(q, control_tag, &control_in[at(q)], sizeof(Control))] = {Role::Control, q, false};
  };
  auto broadcast = [&](const Control& c) {
    sent_status = c;
    for (int q = 0; q < order.p; ++q) {
      if (q == rank_) continue;
      control_out.push_back(c);
      control_ids[control_.post_send(q, control_tag, &control_out.back(), sizeof(Control))] = {Role::Control, q, true};
    }
  };
  if (migrating) {
    for (int q = 0; q < order.p; ++q) {
      if (q != rank_) post_control_recv(q);
    }
  }
  // A control message from peer q arrived at `now`.
  auto on_control = [&](int q, std::int64_t now) {
    const Control c = control_in[at(q)];
    ++progress;
    if (c.kind == ControlKind::Help) {
      HelpJob& job = jobs.emplace_back();
      job.owner = q;
      job.request = c;
      job.arrived = now;
      // The owner saw an old Idle: this rank has started an op since, so the help could delay it. Real slices
      // are always served (after this rank's current op): the owner holds their inputs only in the payload.
      const sched::Action& owned = order.ranks[at(q)][at(static_cast<int>(c.index))];
      job.declined =
          sent_status.kind == ControlKind::Busy && compute_.slice_moves(owned.kind) == Compute::SliceMoves::Modelled;
      job.payload.resize(static_cast<std::size_t>(c.bytes_out));
      data_ids[data_.post_recv(q, help_tag(c.index, false), job.payload.data(), job.payload.size())] = {
          Role::HelpPayload, q, false};
    } else if (c.kind == ControlKind::Declined) {
      help_declined[at(static_cast<int>(c.index))] = 1;
    } else {
      PeerView& v = peers[at(q)];
      v.status = c.kind;
      v.until_ns = c.until_ns;
      v.producer = static_cast<int>(c.producer);
      v.next = static_cast<int>(c.index);
    }
    if (c.kind == ControlKind::Finished) {
      ++peers_finished;  // nothing more comes from q this step
    } else {
      post_control_recv(q);
    }
  };
  // The helper's payload from `owner` is in: the oldest such job without its payload (MPI keeps a pair's
  // messages in order, and an owner's requests with them).
  auto help_payload_in = [&](int owner) {
    for (HelpJob& job : jobs) {
      if (job.owner == owner && !job.payload_in) {
        job.payload_in = true;
        ++progress;
        return;
      }
    }
  };
  // Tells the peers this rank is busy (it starts an op or a help) when it last said otherwise.
  auto say_busy = [&] {
    if (migrating && !finished_sent && sent_status.kind != ControlKind::Busy) broadcast(Control{});
  };
  // Idle with nothing launched: tells the peers what its next op waits for (or that its step is done).
  auto say_idle = [&] {
    if (!migrating || finished_sent || !in_flight.empty()) return;
    if (driver.finished()) {
      Control c;
      c.kind = ControlKind::Finished;
      broadcast(c);
      finished_sent = true;
      return;
    }
    const int next = state.next_in_list();
    if (next >= n || state.is_ready(next)) return;  // blocked on memory: about to run, offers nothing
    Control c;
    c.kind = ControlKind::Idle;
    c.index = next;
    if (announce_known[at(next)]) c.until_ns = in_announce[at(next)].expected_ns;
    if (const auto in = sched::input_of(order, rank_, actions[at(next)]); in && !in->local())
      c.producer = in->from_rank;
    if (sent_status.kind != c.kind || sent_status.until_ns != c.until_ns || sent_status.producer != c.producer ||
        sent_status.index != c.index) {
      broadcast(c);
    }
  };
  // When this rank's output for peer q's op `next` is expected there: kUnknown while its producing op has not
  // started or is `deciding` (it then comes after the op being decided, and so after the help), else the
  // announced time (its start plus estimates). This rank knows it better than q's last Idle, which may predate
  // it.
  auto own_delivery = [&](int q, int next, int deciding) -> std::int64_t {
    const auto in = sched::input_of(order, q, order.ranks[at(q)][at(next)]);
    if (!in || in->from_rank != rank_) return kUnknown;
    const int producer = in->payload == sched::Payload::Activation
                             ? state.index_of(sched::OpKind::F, in->from_chunk, in->microbatch)
                             : state.backward_index(in->from_chunk, in->microbatch);
    return state.is_started(producer) && producer != deciding ? out_announce[at(producer)].expected_ns : kUnknown;
  };
  // The peers that can help now (the simulator's rule, engine.cpp's Helpers, on the peers' last status), in ms
  // since the step began.
  std::vector<sched::HelpOffer> offers;
  auto build_offers = [&](std::int64_t now, int deciding) {
    offers.clear();
    for (int q = 0; q < order.p; ++q) {
      const PeerView& v = peers[at(q)];
      if (q == rank_ || v.engaged_until > now) continue;
      sched::HelpOffer o;
      o.rank = q;
      if (v.status == ControlKind::Idle) {
        const std::int64_t until = v.producer == rank_ ? own_delivery(q, v.next, deciding) : v.until_ns;
        if (until != kUnknown) {
          o.until = since_begin(until) / 1e6;
        } else if (v.producer != rank_) {
          continue;  // nothing known of its next input
        }
      } else if (v.status != ControlKind::Finished) {
        continue;
      }
      offers.push_back(o);
    }
  };
  // Owner: posts the help request for action i to `helper`, its payload, and the reply's receive.
  std::vector<char> help_real(at(n), 0);  // the owner's side: the reply carries real slices to land
  auto post_help = [&](int i, int helper, const Control& c, std::vector<char> payload) {
    control_out.push_back(c);
    control_ids[control_.post_send(helper, control_tag, &control_out.back(), sizeof(Control))] = {Role::Control, helper,
                                                                                                  true};
    help_buffers.push_back(std::move(payload));
    data_ids[data_.post_send(helper, help_tag(i, false), help_buffers.back().data(), help_buffers.back().size())] = {
        Role::HelpSend, i, true};
    ++help_sends;
    ++answers_due;
    reply_buf[at(i)].resize(static_cast<std::size_t>(c.bytes_back));
    data_ids[data_.post_recv(helper, help_tag(i, true), reply_buf[at(i)].data(), reply_buf[at(i)].size())] = {
        Role::HelpReply, i, false};
  };
  // The decision for action i starting at `now` (estimated `estimate_ns` alone): migration.force's entry for this
  // rank and the op's kind, else sched::RankDriver::offload on the peers' offers.
  auto choose = [&](int i, std::int64_t now, double estimate_ns) {
    const sched::Action& a = actions[at(i)];
    if (!options_.forced.empty()) {
      for (const plan::ForcedHelp& f : options_.forced) {
        if (f.owner != rank_ || !f.kinds[static_cast<std::size_t>(a.kind)]) continue;
        sched::HelpOffer offer;
        offer.rank = f.helper;
        return options_.migration.split(a.kind, estimate_ns / 1e6, f.slices, offer);
      }
      return sched::Offload{};  // forcing: no decisions
    }
    build_offers(now, i);
    if (offers.empty()) return sched::Offload{};
    return driver.offload(i, since_begin(now) / 1e6, estimate_ns / 1e6, offers);
  };
  // Owner: decides for action i starting at `now`; on a helper, sends the request and its payload (modelled: at
  // once, of the modelled size; real: the slices' inputs, when the op's compute has them), posts the reply's
  // receive and keeps the owner's share. Returns the op's predicted duration (ns).
  auto offload = [&](int i, std::int64_t now, double estimate_ns) {
    const Compute::SliceMoves moves = compute_.slice_moves(actions[at(i)].kind);
    if (moves == Compute::SliceMoves::None) return estimate_ns;
    const sched::Offload o = choose(i, now, estimate_ns);
    if (o.helper < 0) return estimate_ns;
    const std::int64_t bytes = std::llround(o.bytes);
    Control c;
    c.kind = ControlKind::Help;
    c.index = i;
    c.slices = o.slices;
    c.help_ns = ms_to_ns(o.helper_compute);
    if (moves == Compute::SliceMoves::Real) {
      help_real[at(i)] = 1;
      compute_.give_slices(o.slices, [&, i, c, helper = o.helper](std::vector<float> input, std::size_t answer) {
        Control request = c;
        request.bytes_out = static_cast<std::int64_t>(input.size() * sizeof(float));
        request.bytes_back = static_cast<std::int64_t>(answer * sizeof(float));
        std::vector<char> payload(static_cast<std::size_t>(request.bytes_out));
        std::memcpy(payload.data(), input.data(), payload.size());
        help_bytes[at(i)] = request.bytes_out + request.bytes_back;
        post_help(i, helper, request, std::move(payload));
        push_help_sends();  // before this rank computes its own part
      });
    } else {
      c.bytes_out = (bytes + 1) / 2;  // SliceCosts gives both directions together: half out, half back
      c.bytes_back = bytes - c.bytes_out;
      help_bytes[at(i)] = bytes;
      post_help(i, o.helper, c, std::vector<char>(static_cast<std::size_t>(c.bytes_out)));
    }
    peers[at(o.helper)].engaged_until = now + ms_to_ns(o.help_time);
    help_of[at(i)] = o.helper;
    decided_at[at(i)] = now;
    help_slices[at(i)] = o.slices;
    own_share[at(i)] = o.owner_time / (estimate_ns / 1e6);
    compute_.keep_share(own_share[at(i)]);
    return o.op_time * 1e6;
  };
  // Helper: runs the oldest request whose payload is in (real slices: computes them with the trainer's kernels;
  // modelled: sleeps their time), returns the reply and records the work as a HELP_* event. False when there is
  // none.
  auto serve_help = [&] {
    if (jobs.empty() || !jobs.front().payload_in) return false;
    HelpJob job = std::move(jobs.front());
    jobs.pop_front();
    const sched::Action& a = order.ranks[at(job.owner)][at(static_cast<int>(job.request.index))];
    std::vector<char> answer(static_cast<std::size_t>(job.request.bytes_back));  // modelled: a stand-in
    auto reply = [&] {
      help_buffers.push_back(std::move(answer));
      data_ids[data_.post_send(job.owner, help_tag(job.request.index, true), help_buffers.back().data(),
                               help_buffers.back().size())] = {Role::HelpSend, job.owner, true};
      ++help_sends;
    };
    ++progress;
    if (job.declined) {
      Control c;
      c.kind = ControlKind::Declined;
      c.index = job.request.index;
      control_out.push_back(c);
      control_ids[control_.post_send(job.owner, control_tag, &control_out.back(), sizeof(Control))] = {Role::Control,
                                                                                                       job.owner, true};
      reply();
      return true;
    }
    say_busy();
    const std::int64_t start = clock_.now_ns();
    if (compute_.slice_moves(a.kind) == Compute::SliceMoves::Real) {
      if (hang_helping) std::raise(SIGSTOP);  // CONDUCTOR_INJECT_FAILURE=RANK:STEP:hang-help (fault tests)
      std::vector<float> input(job.payload.size() / sizeof(float));
      std::memcpy(input.data(), job.payload.data(), input.size() * sizeof(float));
      const std::vector<float> result = compute_.compute_slices(a.kind, static_cast<int>(job.request.slices), input);
      if (result.size() * sizeof(float) != answer.size()) {
        throw Error("migration: rank " + std::to_string(rank_) + " computed " + std::to_string(result.size()) +
                    " floats for rank " + std::to_string(job.owner) + "'s " + sched::to_string(a) + " of step " +
                    std::to_string(step) + ", which expects " + std::to_string(answer.size() / sizeof(float)));
      }
      std::memcpy(answer.data(), result.data(), answer.size());
    } else {
      sleep_with_progress_until_ns(steady_now_ns() + job.request.help_ns, keep_moving);
    }
    const std::int64_t end = clock_.now_ns();
    reply();
    trace::OpEvent e;
    e.step = step;
    e.rank = rank_;
    e.stage = order.stage_of(job.owner, a.chunk);
    e.chunk = a.chunk;
    e.microbatch = a.microbatch;
    e.kind = static_cast<trace::EventKind>(static_cast<int>(trace::EventKind::HELP_F) + static_cast<int>(a.kind));
    e.ready_ns = job.arrived;
    e.start_ns = start;
    e.end_ns = end;
    e.bytes = job.request.bytes_out + job.request.bytes_back;
    e.wait_ns = std::max<std::int64_t>(0, start - last_end);
    e.peer = job.owner;
    e.migrated = static_cast<std::int8_t>(job.request.slices);
    outcome.events.push_back(e);
    last_end = std::max(last_end, end);
    return true;
  };
  const auto migration_over = [&] {
    return !migrating || (finished_sent && peers_finished == order.p - 1 && jobs.empty());
  };
  std::vector<std::int64_t> early_send_done(at(n), -1);  // a queued-early send seen complete before its producer
  auto send_finished = [&](int i, std::int64_t now) {
    auto it = send_events.find(i);
    if (it == send_events.end()) {
      early_send_done[at(i)] = now;
      return;
    }
    it->second.end_ns = now;
    if (options_.comm_events) outcome.events.push_back(it->second);
    send_events.erase(it);
  };
  auto drain = [&] {
    const std::vector<TransferId> control_done = control_.poll();
    const std::vector<TransferId> data_done = data_.poll();
    const std::int64_t now = clock_.now_ns();
    poll_now = now;
    for (TransferId id : control_done) {
      const auto it = control_ids.find(id);
      if (it == control_ids.end()) continue;
      const Pending p = it->second;
      control_ids.erase(it);
      if (p.role == Role::Control) {
        if (!p.send) on_control(p.action, now);
      } else if (p.role == Role::Announcement) {
        if (!p.send) announced(p.action, now);
      } else if (!p.send) {
        half_arrived(p.action, Role::Header, now);
      } else if (!has_payload) {
        send_finished(p.action, now);  // the header is the whole message
      }
    }
    for (TransferId id : data_done) {
      const auto it = data_ids.find(id);
      if (it == data_ids.end()) continue;
      const Pending p = it->second;
      data_ids.erase(it);
      if (p.role == Role::HelpPayload) {
        help_payload_in(p.action);
      } else if (p.role == Role::HelpReply) {
        help_back[at(p.action)] = now;
        --answers_due;
        ++progress;
      } else if (p.role == Role::HelpSend) {
        --help_sends;  // its buffer is freed with the step's
      } else if (!p.send) {
        half_arrived(p.action, Role::Tensor, now);
      } else {
        send_finished(p.action, now);
        compute_.give_buffer(out_buf[at(p.action)]);  // its producer finished before the send could complete
        out_buf[at(p.action)] = nullptr;
      }
    }
    while (!delayed.empty() && delayed.top().first <= now) {
      accept(delayed.top().second, now);
      delayed.pop();
    }
    return control_done.size() + data_done.size();
  };
  // A help payload above the eager limit moves only while its sender polls (a rendezvous; and without a
  // single-copy mechanism), so the sender polls for a moment before it sleeps in an op: long enough for an idle
  // peer to take it, short enough not to wait out a peer that turned out busy.
  if (migrating) {
    // Also while a helper's answer is due: it is a rendezvous too, which the helper's poll alone cannot finish.
    keep_moving = [&] {
      if (help_sends == 0 && answers_due == 0) return false;
      drain();
      return help_sends > 0 || answers_due > 0;
    };
    compute_.set_progress(keep_moving);
  }
  push_help_sends = [&] {
    const std::int64_t deadline = clock_.now_ns() + 2'000'000;
    while (help_sends > 0 && poll_now < deadline) drain();
  };
  auto post_tensor_send = [&](int i, const sched::Transfer& out) {
    data_ids[data_.post_send(out.to_rank, tag_of(order, out), out_buf[at(i)], payload_bytes)] = {Role::Tensor, i, true};
  };

  auto launch = [&](int i) {
    const auto& a = actions[at(i)];
    const int stage = order.stage_of(rank_, a.chunk);
    const auto in = sched::input_of(order, rank_, a);
    const auto out = sched::output_of(order, rank_, a);
    const float* in_ptr = nullptr;
    if (in && has_payload) {
      if (in->local()) {
        // The producer ran on this rank: its output buffer is this op's input.
        const int producer = in->payload == sched::Payload::Activation
                                 ? state.index_of(sched::OpKind::F, in->from_chunk, in->microbatch)
                                 : state.backward_index(in->from_chunk, in->microbatch);
        in_ptr = out_buf[at(producer)];
      } else {
        in_ptr = in_buf[at(i)];
      }
    }
    if (out && has_payload) out_buf[at(i)] = compute_.take_buffer();
    const std::int64_t now = clock_.now_ns();
    driver.start(i, since_begin(now));
    say_busy();
    double predicted = announcing ? dopt.estimate(a) : migrating ? model_ns(a) : 0.0;
    if (migrating) {
      predicted = offload(i, now, model_ns(a));
      push_help_sends();  // before this rank sleeps in its share
    }
    if (announce_inputs && out && !out->local()) {
      const double expected = static_cast<double>(now) + predicted + comm_estimate_ns();
      out_announce[at(i)] = {std::isfinite(expected) ? std::llround(expected) : kUnknown, now};
      control_ids[control_.post_send(out->to_rank, announce_tag_of(order, *out), &out_announce[at(i)],
                                     sizeof(Announcement))] = {Role::Announcement, i, true};
    }
    ticket[at(i)] = compute_.launch(step, a, stage, in_ptr, out_buf[at(i)]);
    in_flight.push_back(i);
    ++progress;
    // A device transport queues the send behind the producer now; the GPU sends as soon as the op is done.
    if (out && !out->local() && has_payload && early_sends) post_tensor_send(i, *out);
  };

  // Ops finish in launch order (one stream; host backends inside launch()), so they are retired in that order
  // and the first unfinished one ends the pass: a later op seen finished first (its event completed between
  // two queries) waits one pass, and trace events and wait times stay in device order.
  std::vector<OpSpan> own_span(at(n));
  std::vector<char> own_done(at(n), 0);
  auto retire = [&] {
    while (!in_flight.empty()) {
      const int i = in_flight.front();
      if (!own_done[at(i)]) {
        if (!compute_.finished(ticket[at(i)], own_span[at(i)])) break;
        own_done[at(i)] = 1;
      }
      if (help_of[at(i)] >= 0 && help_back[at(i)] < 0) break;  // the helper's part is not in yet
      if (help_real[at(i)]) {
        std::vector<float> answer(reply_buf[at(i)].size() / sizeof(float));
        std::memcpy(answer.data(), reply_buf[at(i)].data(), answer.size() * sizeof(float));
        compute_.land_slices(actions[at(i)], order.stage_of(rank_, actions[at(i)].chunk), answer);
        help_real[at(i)] = 0;
      }
      if (help_declined[at(i)]) {
        // The helper was busy after all: the owner computes the slices it sent (its share's rate).
        const std::int64_t own = own_span[at(i)].end_ns - own_span[at(i)].start_ns;
        sleep_until_ns(steady_now_ns() + std::llround(static_cast<double>(own) * (1.0 / own_share[at(i)] - 1.0)));
        own_span[at(i)].end_ns = steady_now_ns();
        help_back[at(i)] = clock_.to_common(own_span[at(i)].end_ns);
        help_slices[at(i)] = 0;
        own_share[at(i)] = 1.0;
        help_declined[at(i)] = 0;
      }
      const OpSpan span = own_span[at(i)];
      in_flight.erase(in_flight.begin());
      ++progress;
      const std::int64_t start = std::min(clock_.to_common(span.start_ns), decided_at[at(i)]);
      const std::int64_t end = std::max(clock_.to_common(span.end_ns), help_back[at(i)]);
      driver.complete(i, since_begin(end));
      const auto& a = actions[at(i)];
      // The op's time alone (its share scaled back): what the next step's estimates expect.
      measuring.add(a, static_cast<double>(span.end_ns - span.start_ns) / own_share[at(i)]);
      trace::OpEvent e;
      e.step = step;
      e.rank = rank_;
      e.stage = order.stage_of(rank_, a.chunk);
      e.chunk = a.chunk;
      e.microbatch = a.microbatch;
      e.kind = static_cast<trace::EventKind>(a.kind);
      e.ready_ns = std::min(step_begin + static_cast<std::int64_t>(driver.ready_at(i)), start);
      e.start_ns = start;
      e.end_ns = end;
      e.bytes = bytes;
      e.wait_ns = std::max<std::int64_t>(0, start - last_end);
      e.migrated = static_cast<std::int8_t>(help_slices[at(i)]);
      outcome.events.push_back(e);
      last_end = std::max(last_end, end);

      // Inputs are consumed: a received buffer, or the local producer's output buffer, goes back.
      const auto in = sched::input_of(order, rank_, a);
      if (in && has_payload) {
        if (in->local()) {
          const int producer = in->payload == sched::Payload::Activation
                                   ? state.index_of(sched::OpKind::F, in->from_chunk, in->microbatch)
                                   : state.backward_index(in->from_chunk, in->microbatch);
          compute_.give_buffer(out_buf[at(producer)]);
          out_buf[at(producer)] = nullptr;
        } else {
          compute_.give_buffer(in_buf[at(i)]);
          in_buf[at(i)] = nullptr;
        }
      }
      const auto out = sched::output_of(order, rank_, a);
      if (out && !out->local()) {
        send_events[i] = transfer_event(step, rank_, trace::EventKind::SEND, *out, end, end, bytes);
        if (early_send_done[at(i)] >= 0) send_finished(i, std::max(end, early_send_done[at(i)]));
        out_header[at(i)].ready_at_ns = end + ms_to_ns(injected_comm_ms(step, *out));
        control_ids[control_.post_send(out->to_rank, tag_of(order, *out), &out_header[at(i)], sizeof(Header))] = {
            Role::Header, i, true};
        if (has_payload && !early_sends) post_tensor_send(i, *out);
      }
    }
  };

  // A help whose answer has not come within the watchdog's limit ends the run naming the helper: the quiet
  // timer above never runs out meanwhile, since the owner's op stays in flight until the answer is in.
  auto check_helps = [&](std::int64_t now) {
    for (int i : in_flight) {
      if (help_of[at(i)] < 0 || help_back[at(i)] >= 0 || !watchdog_.expired(decided_at[at(i)], now)) continue;
      const sched::Action& a = actions[at(i)];
      watchdog_.fire("the answer of helper rank " + std::to_string(help_of[at(i)]) + " to its " +
                         sched::to_string(a.kind) + " of microbatch " + std::to_string(a.microbatch) + " (stage " +
                         std::to_string(order.stage_of(rank_, a.chunk)) + ", " + std::to_string(help_slices[at(i)]) +
                         " slices) in step " + std::to_string(step),
                     static_cast<double>(now - decided_at[at(i)]) * 1e-9, help_of[at(i)]);
    }
  };
  std::int64_t idle_sleep_ns = 5'000;
  Watchdog::Timer quiet(watchdog_, clock_.now_ns());
  while (!driver.finished() || !migration_over()) {
    // Migration: poll until nothing more completes. A peer's control messages queue up while this rank sleeps
    // in an op, and each poll matches one per peer (its receive is re-posted after each), so one poll would
    // decide on an old status.
    // Open MPI's test-some progresses only on a call that finds nothing complete, so two empty polls in a row.
    const std::size_t first = drain();
    for (int empty = first > 0 ? 0 : 1, polls = 0; migrating && empty < 2 && polls < 64; ++polls) {
      empty = drain() > 0 ? 0 : empty + 1;
    }
    retire();
    if (serve_help()) {
      push_help_sends();  // the reply, before this rank sleeps in an op of its own
      continue;
    }
    // A help accepted while idle runs first: its payload is on its way.
    const bool help_pending = !jobs.empty() && !jobs.front().declined;
    if (!driver.finished() && !help_pending && static_cast<int>(in_flight.size()) < depth) {
      const int i = driver.next(driver.latest());  // see RankDriver::latest: a replay makes the same choice
      if (i >= 0) {
        idle_sleep_ns = 5'000;
        launch(i);
        continue;
      }
    }
    say_idle();
    // Waiting on a peer: nothing moved since the last poll, nothing of its own in flight, no injected delay
    // pending. One comparison per poll on the time drain() read.
    if (progress != seen_progress || !in_flight.empty() || !delayed.empty()) {
      seen_progress = progress;
      quiet.restart(poll_now);
    } else if (quiet.expired(poll_now)) {
      const Awaited awaited = describe_wait(order, state, arrived, step);
      watchdog_.fire(awaited.what, quiet.waited_s(poll_now), awaited.peer);
    }
    if (migrating) check_helps(poll_now);
    if (debug_idle && clock_.now_ns() - last_end > 3'000'000'000LL) {
      std::string st;
      for (int k = 0; k < n; ++k) {
        st += sched::to_string(actions[at(k)]) +
              (state.is_done(k)      ? "d"
               : state.is_ready(k)   ? "r"
               : state.is_started(k) ? "s"
                                     : "-") +
              " ";
      }
      std::fprintf(stderr, "[rank %d] idle: next %d mem %.3f/%.3f pending %zu+%zu in flight %zu: %s\n", rank_,
                   state.next_in_list(), state.memory_in_use(), state.memory_limit(), control_.pending(),
                   data_.pending(), in_flight.size(), st.c_str());
      last_end = clock_.now_ns();
    }
    // Idle: nothing ready (or strict's next op not ready), or the device queue is full.
    if (!options_.oversubscribed || !in_flight.empty()) {
      // A core of its own (or a GPU op about to finish): poll without sleeping, so an arrival is seen within
      // microseconds.
      std::this_thread::yield();
      continue;
    }
    // Many ranks per core: sleep between polls, backing off from 10 us to 400 us, so that idle ranks leave the
    // cores to those that compute.
    idle_sleep_ns = std::min<std::int64_t>(400'000, idle_sleep_ns * 2);
    std::int64_t wake = clock_.now_ns() + idle_sleep_ns;
    if (!delayed.empty()) wake = std::min(wake, delayed.top().first);
    std::this_thread::sleep_for(std::chrono::nanoseconds(std::max<std::int64_t>(0, wake - clock_.now_ns())));
  }
  // Sends must complete before their buffers are reused; receives are all done (every op ran).
  const std::int64_t drain_begin = clock_.now_ns();
  Watchdog::Timer draining(watchdog_, drain_begin);
  while (control_.pending() > 0 || data_.pending() > 0) {
    if (debug_idle && clock_.now_ns() - drain_begin > 3'000'000'000LL) {
      std::fprintf(stderr, "[rank %d] draining: pending %zu+%zu sends %zu\n", rank_, control_.pending(),
                   data_.pending(), send_events.size());
    }
    drain();
    if (draining.expired(poll_now)) {
      watchdog_.fire("its peers to take the last " + std::to_string(control_.pending() + data_.pending()) +
                         " messages it sent in step " + std::to_string(step),
                     draining.waited_s(poll_now));
    }
    if (control_.pending() > 0 || data_.pending() > 0) std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  for (float*& b : out_buf) {
    if (b) compute_.give_buffer(b);  // outputs without a consumer on this rank (none in valid schedules)
    b = nullptr;
  }
  if (migrating) compute_.set_progress({});  // keep_moving refers to this step's state
  outcome.peak_memory = state.peak_memory();
  measured_ = std::move(measuring);
  return outcome;
}

}  // namespace conductor::runtime
