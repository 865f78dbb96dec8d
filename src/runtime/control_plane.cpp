#include "conductor/runtime/control_plane.hpp"

#include <algorithm>

namespace conductor::runtime {

int StepContext::producer_of(const sched::Transfer& in) const {
  return in.payload == sched::Payload::Activation ? state().index_of(sched::OpKind::F, in.from_chunk, in.microbatch)
                                                  : state().backward_index(in.from_chunk, in.microbatch);
}

void StepContext::record(const trace::OpEvent& e) {
  outcome.events.push_back(e);
  last_end = std::max(last_end, e.end_ns);
}

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

ControlPlane::ControlPlane(StepContext& ctx, Transport& control, Transport& data, const CommonClock& clock,
                           bool announce_inputs, bool comm_events, std::int64_t tensor_bytes)
    : ctx_(ctx),
      control_(control),
      data_(data),
      clock_(clock),
      announce_inputs_(announce_inputs),
      comm_events_(comm_events),
      tensor_bytes_(tensor_bytes) {
  const std::size_t n = ctx.actions().size();
  in_header_.resize(n);
  out_header_.resize(n);
  in_announce_.resize(n);
  out_announce_.resize(n);
  header_in_.assign(n, 0);
  tensor_in_.assign(n, 0);
  arrived_.assign(n, 0);
  announce_known_.assign(n, 0);
  announce_held_.assign(n, 0);
}

int ControlPlane::tag_of(const sched::Schedule& s, const sched::Transfer& t) {
  // Unique per (direction, receiving stage, microbatch) within a step. Overlapping steps (post-validation) reuse
  // them safely: a rank posts one receive per tag and step, in step order, and MPI keeps one sender's messages
  // on one tag in order, so the k-th message on a tag is the k-th step's (a rerun step is one more step here).
  return (static_cast<int>(t.payload) * s.num_stages() + t.to_stage) * s.m + t.microbatch;
}

int ControlPlane::announce_tag_of(const sched::Schedule& s, const sched::Transfer& t) {
  return 2 * s.num_stages() * s.m + tag_of(s, t);
}

void ControlPlane::post_send(Plane plane, int peer, int tag, const void* buffer, std::size_t bytes, Role role,
                             int action) {
  if (plane == Plane::Control) {
    control_ids_[control_.post_send(peer, tag, buffer, bytes)] = {role, action, true, peer};
  } else {
    data_ids_[data_.post_send(peer, tag, buffer, bytes)] = {role, action, true, peer};
  }
}

void ControlPlane::post_recv(Plane plane, int peer, int tag, void* buffer, std::size_t bytes, Role role, int action) {
  if (plane == Plane::Control) {
    control_ids_[control_.post_recv(peer, tag, buffer, bytes)] = {role, action, false, peer};
  } else {
    data_ids_[data_.post_recv(peer, tag, buffer, bytes)] = {role, action, false, peer};
  }
}

void ControlPlane::expect_input(int i, float* tensor, std::size_t tensor_bytes) {
  const std::size_t at = static_cast<std::size_t>(i);
  const auto in = sched::input_of(ctx_.order, ctx_.rank, ctx_.actions()[at]);
  const int tag = tag_of(ctx_.order, *in);
  post_recv(Plane::Control, in->from_rank, tag, &in_header_[at], sizeof(Header), Role::Header, i);
  if (announce_inputs_) {
    post_recv(Plane::Control, in->from_rank, announce_tag_of(ctx_.order, *in), &in_announce_[at], sizeof(Announcement),
              Role::Announcement, i);
  }
  if (tensor) {
    post_recv(Plane::Data, in->from_rank, tag, tensor, tensor_bytes, Role::Tensor, i);
  } else {
    tensor_in_[at] = 1;  // stand-ins: the header is the whole message
  }
}

void ControlPlane::announce(int i, const sched::Transfer& out, std::int64_t expected_ns, std::int64_t now) {
  Announcement& a = out_announce_[static_cast<std::size_t>(i)];
  a = {expected_ns, now};
  post_send(Plane::Control, out.to_rank, announce_tag_of(ctx_.order, out), &a, sizeof(Announcement), Role::Announcement,
            i);
}

void ControlPlane::send_header(int i, const sched::Transfer& out, std::int64_t ready_at_ns) {
  Header& h = out_header_[static_cast<std::size_t>(i)];
  h.ready_at_ns = ready_at_ns;
  post_send(Plane::Control, out.to_rank, tag_of(ctx_.order, out), &h, sizeof(Header), Role::Header, i);
}

std::int64_t ControlPlane::announced_arrival(int i) const {
  const std::size_t at = static_cast<std::size_t>(i);
  return announce_known_[at] ? in_announce_[at].expected_ns : kUnknown;
}

std::size_t poll_until_quiet(const std::function<std::size_t()>& poll_once, int quiet) {
  std::size_t completed = 0;
  for (int empty = quiet, polls = 0; empty < 2 && polls < 64; ++polls) {
    const std::size_t n = poll_once();
    completed += n;
    empty = n > 0 ? 0 : empty + 1;
  }
  return completed;
}

std::vector<int> ControlPlane::pending_send_peers() const {
  std::vector<int> peers;
  for (const auto* ids : {&control_ids_, &data_ids_}) {
    for (const auto& [id, p] : *ids) {
      if (p.send) peers.push_back(p.peer);
    }
  }
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}

std::size_t ControlPlane::poll(const std::function<void(const Completion&)>& other, bool data) {
  const std::vector<TransferId> control_done = control_.poll();
  const std::vector<TransferId> data_done = data ? data_.poll() : std::vector<TransferId>{};
  now_ = clock_.now_ns();
  release_announcements(now_);
  file(control_done, control_ids_, other);
  file(data_done, data_ids_, other);
  while (!delayed_.empty() && delayed_.top().first <= now_) {
    accept(delayed_.top().second, now_);
    delayed_.pop();
  }
  return control_done.size() + data_done.size();
}

// One transport's completions (each transport numbers its own): a received header or tensor (an input's
// halves) and an announcement are handled here, every other completion goes to `other`.
void ControlPlane::file(const std::vector<TransferId>& done, std::unordered_map<TransferId, Pending>& ids,
                        const std::function<void(const Completion&)>& other) {
  for (TransferId id : done) {
    const auto it = ids.find(id);
    if (it == ids.end()) continue;
    const Pending p = it->second;
    ids.erase(it);
    if (!p.send && (p.role == Role::Header || p.role == Role::Tensor)) {
      half_arrived(p.action, p.role, now_);
    } else if (!p.send && p.role == Role::Announcement) {
      announced(p.action, now_);
    } else {
      other({p.role, p.action, p.send});
    }
  }
}

void ControlPlane::half_arrived(int i, Role role, std::int64_t now) {
  const std::size_t at = static_cast<std::size_t>(i);
  (role == Role::Header ? header_in_ : tensor_in_)[at] = 1;
  ++ctx_.progress;
  if (!header_in_[at] || !tensor_in_[at]) return;
  arrived_[at] = 1;
  const std::int64_t ready_at = in_header_[at].ready_at_ns;
  if (ready_at > now) {
    delayed_.emplace(ready_at, i);
  } else {
    accept(i, now);
  }
}

// Input i is usable from `when` on: its arrival, or (held until then) the injected ready time stamped by the
// sender. `when` is the time the driver learns of it, so a replay of the trace sees what the driver saw.
void ControlPlane::accept(int i, std::int64_t when) {
  if (announce_held_[static_cast<std::size_t>(i)]) tell_driver(i, when);  // the input outran its announcement
  ctx_.driver.input_arrived(i, ctx_.since_begin(when));
  if (comm_events_) {
    const auto in = sched::input_of(ctx_.order, ctx_.rank, ctx_.actions()[static_cast<std::size_t>(i)]);
    ctx_.outcome.events.push_back(
        transfer_event(ctx_.step, ctx_.rank, trace::EventKind::RECV, *in, ctx_.begin, when, tensor_bytes_));
  }
}

// An announcement of input i received at `now` (when its producer measured anything): migration knows of it at
// once; the driver learns of it once its latency has passed (hold_announcements).
void ControlPlane::announced(int i, std::int64_t now) {
  const Announcement& a = in_announce_[static_cast<std::size_t>(i)];
  if (a.expected_ns == kUnknown) return;
  announce_known_[static_cast<std::size_t>(i)] = 1;
  ++ctx_.outcome.announcements;
  const std::int64_t due = a.start_ns + announce_latency_ns_;
  if (due > now) {
    announce_held_[static_cast<std::size_t>(i)] = 1;
    held_announcements_.emplace(due, i);
  } else {
    tell_driver(i, now);
  }
}

// The driver learns at `when` when input i is expected; a comm-event trace records it then, so a replay feeds the
// same announcements at the same times.
void ControlPlane::tell_driver(int i, std::int64_t when) {
  const Announcement& a = in_announce_[static_cast<std::size_t>(i)];
  announce_held_[static_cast<std::size_t>(i)] = 0;
  ctx_.driver.announce(i, ctx_.since_begin(a.expected_ns), ctx_.since_begin(when));
  if (comm_events_) {
    const auto in = sched::input_of(ctx_.order, ctx_.rank, ctx_.actions()[static_cast<std::size_t>(i)]);
    trace::OpEvent e = transfer_event(ctx_.step, ctx_.rank, trace::EventKind::ANNOUNCE, *in, a.start_ns, when, 0);
    e.ready_ns = a.expected_ns;
    ctx_.outcome.events.push_back(e);
  }
}

void ControlPlane::release_announcements(std::int64_t now) {
  while (!held_announcements_.empty() && held_announcements_.top().first <= now) {
    const int i = held_announcements_.top().second;
    held_announcements_.pop();
    if (announce_held_[static_cast<std::size_t>(i)]) tell_driver(i, now);  // not already told with its input
  }
}

}  // namespace conductor::runtime
