#include "conductor/runtime/migration_peer.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "conductor/runtime/fault_injection.hpp"
#include "conductor/trace/event.hpp"
#include "conductor/util/error.hpp"

namespace conductor::runtime {

namespace {

// Real slices' payloads and answers are floats (model::StageModel's requests) carried as the transport's bytes.
std::vector<char> as_bytes(const std::vector<float>& floats) {
  std::vector<char> bytes(floats.size() * sizeof(float));
  std::memcpy(bytes.data(), floats.data(), bytes.size());
  return bytes;
}
std::vector<float> as_floats(const std::vector<char>& bytes) {
  std::vector<float> floats(bytes.size() / sizeof(float));
  std::memcpy(floats.data(), bytes.data(), floats.size() * sizeof(float));
  return floats;
}

}  // namespace

MigrationPeer::MigrationPeer(StepContext& ctx, ControlPlane& plane, Compute& compute, const CommonClock& clock,
                             const ExecutorOptions& options, const Watchdog& watchdog,
                             std::function<std::size_t(bool data)> drain, Estimate estimate_ms, double comm_ms)
    : ctx_(ctx),
      plane_(plane),
      compute_(compute),
      clock_(clock),
      options_(options),
      watchdog_(watchdog),
      drain_(std::move(drain)),
      chains_(ctx.order),
      hang_helping_(injected_failure(ctx.rank, ctx.step) == InjectedFailure::HangHelp),
      control_in_(static_cast<std::size_t>(ctx.order.p)),
      peers_(static_cast<std::size_t>(ctx.order.p)),
      owned_(ctx.actions().size()),
      listens_(static_cast<std::size_t>(ctx.order.p), 0) {
  for (int q = 0; q < ctx.order.p; ++q) {
    if (q != ctx.rank) post_control_recv(q);
    listens_[static_cast<std::size_t>(q)] = q != ctx.rank && decides(q);
  }
  // While this rank sleeps in an op or a help, the payloads it sent keep moving; also while a helper's answer is
  // due: it is a rendezvous too, which the helper's poll alone cannot finish.
  compute_.set_progress([this] { return keep_moving(); });
  // Known of a peer's op: its awaited input's announced arrival, and that it waits for it, when the peer's last
  // Idle named it (or this rank produces that input).
  known_.expected = [this](int r, int i) {
    const PeerView& v = peers_[static_cast<std::size_t>(r)];
    const std::int64_t t = chains_.producer(r, i) == ctx_.rank     ? own_delivery(r, i, deciding_)
                           : v.status == Kind::Idle && v.next == i ? v.until_ns
                                                                   : kUnknown;
    return t == kUnknown ? std::numeric_limits<double>::quiet_NaN() : ctx_.since_begin(t) / 1e6;
  };
  known_.waiting = [this](int r, int i) {
    const PeerView& v = peers_[static_cast<std::size_t>(r)];
    return v.status == Kind::Idle && v.next == i;
  };
  known_.estimate = [this, estimate = std::move(estimate_ms)](int r, int i) {
    return estimate(r, ctx_.order.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)]);
  };
  known_.comm = comm_ms;
}

MigrationPeer::~MigrationPeer() { compute_.set_progress({}); }  // the progress function refers to this step

// Adds the CPU time of its scope to control_ns_, unless an enclosing scope counts it already (a control
// message handled during the polls before a launch, catch_up).
class MigrationPeer::Timed {
 public:
  explicit Timed(MigrationPeer& peer) : peer_(peer), outer_(!peer.timing_), t0_(outer_ ? thread_cpu_ns() : 0) {
    peer_.timing_ = true;
  }
  ~Timed() {
    if (!outer_) return;
    peer_.control_ns_ += thread_cpu_ns() - t0_;
    peer_.timing_ = false;
  }
  Timed(const Timed&) = delete;
  Timed& operator=(const Timed&) = delete;

 private:
  MigrationPeer& peer_;
  bool outer_;
  std::int64_t t0_;
};

// Rank q decides (sched::RankDriver::offload on its peers' statuses) when it is not forced and some op of its
// list can give slices away: only such a rank reads statuses.
bool MigrationPeer::decides(int q) const {
  if (!options_.forced.empty()) return false;
  for (const sched::Action& a : ctx_.order.ranks[static_cast<std::size_t>(q)]) {
    if (moves_of(q, a) != Compute::SliceMoves::None) return true;
  }
  return false;
}

bool MigrationPeer::keep_moving() {
  if (sends_ == 0 && answers_due_ == 0) return false;
  drain_(true);
  return sends_ > 0 || answers_due_ > 0;
}

// Tags: control above the announcements; payloads above every tensor tag, out and back per owner's list position.
int MigrationPeer::control_tag() const { return 4 * ctx_.order.num_stages() * ctx_.order.m; }

int MigrationPeer::help_tag(std::int64_t index, bool back) const {
  return 2 * ctx_.order.num_stages() * ctx_.order.m + 2 * static_cast<int>(index) + (back ? 1 : 0);
}

void MigrationPeer::post_control_recv(int q) {
  plane_.post_recv(Plane::Control, q, control_tag(), &control_in_[static_cast<std::size_t>(q)], sizeof(Control),
                   Role::Control, q);
}

void MigrationPeer::send_control(int q, const Control& c) {
  const Timed timed(*this);
  control_out_.push_back(c);
  plane_.post_send(Plane::Control, q, control_tag(), &control_out_.back(), sizeof(Control), Role::Control, q);
}

// A status to the peers that read it (Finished: to every peer, which counts them to end its step), but `skip`.
void MigrationPeer::broadcast(const Control& c, int skip) {
  sent_status_ = c;
  for (int q = 0; q < ctx_.order.p; ++q) {
    if (q == ctx_.rank || q == skip || (c.kind != Kind::Finished && !listens_[static_cast<std::size_t>(q)])) continue;
    send_control(q, c);
    ++statuses_sent_;
  }
}

void MigrationPeer::handle(const Completion& c, std::int64_t now) {
  ++handled_;
  switch (c.role) {
    case Role::Control:
      if (!c.send) on_control(c.action, now);
      break;
    case Role::HelpPayload: payload_in(c.action); break;
    case Role::HelpReply: {
      // A modelled reply is a stand-in of the modelled size whose first byte is the helper's verdict (declined or
      // served): one message, so the owner cannot end its op on the reply before it learns that it was declined.
      Owned& own = owned_[static_cast<std::size_t>(c.action)];
      const sched::Action& a = ctx_.actions()[static_cast<std::size_t>(c.action)];
      if (moves_of(ctx_.rank, a) == Compute::SliceMoves::Modelled && !own.reply.empty() &&
          own.reply.front() == kDeclined) {
        own.declined = true;
      }
      own.back = now;
      --answers_due_;
      ++ctx_.progress;
      break;
    }
    case Role::HelpSend: --sends_; break;  // its buffer is freed with the step's
    default: break;
  }
}

// A control message from peer q arrived at `now`.
void MigrationPeer::on_control(int q, std::int64_t now) {
  const Timed timed(*this);
  const Control c = control_in_[static_cast<std::size_t>(q)];
  ++ctx_.progress;
  if (c.kind == Kind::Help) {
    Job& job = jobs_.emplace_back();
    job.owner = q;
    job.request = c;
    job.arrived = now;
    // The owner saw an old Idle: this rank has started an op since, so the help could delay it. Real slices are
    // always served (after this rank's current op): the owner holds their inputs only in the payload.
    const sched::Action& owned = ctx_.order.ranks[static_cast<std::size_t>(q)][static_cast<std::size_t>(c.index)];
    job.declined = busy_ && moves_of(q, owned) == Compute::SliceMoves::Modelled;
    const std::int64_t payload_begin = thread_cpu_ns();  // the payload's buffer and receive: not control
    job.payload.resize(static_cast<std::size_t>(c.bytes_out));
    plane_.post_recv(Plane::Data, q, help_tag(c.index, false), job.payload.data(), job.payload.size(),
                     Role::HelpPayload, q);
    control_ns_ -= thread_cpu_ns() - payload_begin;
  } else {
    PeerView& v = peers_[static_cast<std::size_t>(q)];
    v.status = c.kind;
    v.until_ns = c.until_ns;
    v.next = static_cast<int>(c.index);
    v.memory_free = c.memory_free;
  }
  if (c.kind == Kind::Finished) {
    ++peers_finished_;  // nothing more comes from q this step
  } else {
    post_control_recv(q);
  }
}

// The helper's payload from `owner` is in: the oldest such job without its payload (MPI keeps a pair's messages
// in order, and an owner's requests with them).
void MigrationPeer::payload_in(int owner) {
  for (Job& job : jobs_) {
    if (job.owner == owner && !job.payload_in) {
      job.payload_in = true;
      ++ctx_.progress;
      return;
    }
  }
}

void MigrationPeer::say_busy() {
  if (finished_sent_) return;
  busy_ = true;
  if (sent_status_.kind == Kind::Busy) return;
  // An Idle whose announced arrival has passed changes no decision that Busy would: its window has closed (no
  // slice fits, sched::Migration::decide), and a chain through it starts now, as through a busy rank
  // (sched::InputChains). An owner producing that input holds the same time (own_delivery: its announcement).
  if (sent_status_.kind == Kind::Idle && sent_status_.until_ns != kUnknown &&
      sent_status_.until_ns <= clock_.now_ns()) {
    return;
  }
  broadcast(Control{});
}

void MigrationPeer::say_idle(bool ops_in_flight) {
  if (finished_sent_ || ops_in_flight) return;
  if (ctx_.driver.finished()) {
    Control c;
    c.kind = Kind::Finished;
    c.memory_free = memory_free();
    broadcast(c);
    finished_sent_ = true;
    busy_ = false;
    return;
  }
  const sched::Arbiter& state = ctx_.state();
  const int next = state.next_in_list();
  if (next >= static_cast<int>(ctx_.actions().size()) || state.is_ready(next)) return;  // blocked on memory
  Control c;
  c.kind = Kind::Idle;
  c.index = next;
  c.until_ns = plane_.announced_arrival(next);
  c.memory_free = memory_free();
  busy_ = false;
  if (sent_status_.kind == c.kind && sent_status_.index == c.index && sent_status_.memory_free == c.memory_free) {
    // Only the arrival is new (announced since the last Idle): the rank that announced it reads its own
    // announcement instead (own_delivery), so it is told nothing.
    if (sent_status_.until_ns != c.until_ns) broadcast(c, chains_.producer(ctx_.rank, next));
    return;
  }
  broadcast(c);
}

// M_F this rank may still hold: as the simulator's offers count it (the configured limit, not backfilling's budget,
// less its ops' memory in use; sched/engine.cpp), infinite without a limit.
double MigrationPeer::memory_free() const {
  return options_.memory_limit > 0 ? options_.memory_limit - ctx_.state().memory_in_use()
                                   : std::numeric_limits<double>::infinity();
}

bool MigrationPeer::over() const { return finished_sent_ && peers_finished_ == ctx_.order.p - 1 && jobs_.empty(); }

// When this rank's output for peer q's op `next` is expected there: kUnknown while its producing op has not
// started or is `deciding` (it then comes after the op being decided, and so after the help), else the announced
// time (its start plus estimates). This rank knows it better than q's last Idle, which may predate it.
std::int64_t MigrationPeer::own_delivery(int q, int next, int deciding) const {
  if (chains_.producer(q, next) != ctx_.rank) return kUnknown;
  const int producer = chains_.producer_op(q, next);
  return ctx_.state().is_started(producer) && producer != deciding ? plane_.own_announcement(producer) : kUnknown;
}

// The peers that can help now (the simulator's rule and bound, sched::InputChains, on the peers' last status), in
// ms since the step began.
void MigrationPeer::build_offers(std::int64_t now, int deciding) {
  offers_.clear();
  deciding_ = deciding;
  for (int q = 0; q < ctx_.order.p; ++q) {
    const PeerView& v = peers_[static_cast<std::size_t>(q)];
    if (q == ctx_.rank || v.engaged_until > now) continue;
    sched::HelpOffer o;
    o.rank = q;
    o.memory_free = v.memory_free;
    if (v.status == Kind::Idle) {
      o.until = chains_.earliest_input(q, v.next, ctx_.rank, ctx_.since_begin(now) / 1e6, known_);
      if (std::isnan(o.until)) continue;  // nothing known of its next input
    } else if (v.status != Kind::Finished) {
      continue;
    }
    offers_.push_back(o);
  }
}

// The decision for action i: migration.force's entry for this rank and the op's kind, else
// sched::RankDriver::offload on the peers' offers.
sched::Offload MigrationPeer::choose(int i, std::int64_t now, double estimate_ns) {
  const sched::Action& a = ctx_.actions()[static_cast<std::size_t>(i)];
  if (!options_.forced.empty()) {
    for (const plan::ForcedHelp& f : options_.forced) {
      if (f.owner != ctx_.rank || !f.kinds[static_cast<std::size_t>(a.kind)]) continue;
      sched::HelpOffer offer;
      offer.rank = f.helper;
      return options_.migration.split(a.kind, estimate_ns / 1e6, f.slices, offer);
    }
    return sched::Offload{};  // forcing: no decisions
  }
  build_offers(now, i);
  if (offers_.empty()) return sched::Offload{};
  return ctx_.driver.offload(i, ctx_.since_begin(now) / 1e6, estimate_ns / 1e6, offers_);
}

// Owner: posts the help request for action i to `helper`, its payload, and the reply's receive.
void MigrationPeer::post_help(int i, int helper, const Control& c, std::vector<char> payload) {
  send_control(helper, c);
  buffers_.push_back(std::move(payload));
  plane_.post_send(Plane::Data, helper, help_tag(i, false), buffers_.back().data(), buffers_.back().size(),
                   Role::HelpSend, i);
  ++sends_;
  ++answers_due_;
  owned_[static_cast<std::size_t>(i)].back = -1;  // due (F and B ask once per layer)
  std::vector<char>& reply = owned_[static_cast<std::size_t>(i)].reply;
  reply.resize(static_cast<std::size_t>(c.bytes_back));
  plane_.post_recv(Plane::Data, helper, help_tag(i, true), reply.data(), reply.size(), Role::HelpReply, i);
}

double MigrationPeer::offload(int i, std::int64_t now, double estimate_ns) {
  const sched::Action& op = ctx_.actions()[static_cast<std::size_t>(i)];
  const Compute::SliceMoves moves = moves_of(ctx_.rank, op);
  if (moves == Compute::SliceMoves::None) return estimate_ns;
  sched::Offload o;
  {
    const Timed timed(*this);  // the decision (its polls are timed in catch_up, the request in send_control)
    o = choose(i, now, estimate_ns);
  }
  ++decisions_;
  if (o.helper < 0) return estimate_ns;
  slices_given_ += o.slices;
  Owned& own = owned_[static_cast<std::size_t>(i)];
  Control c;
  c.kind = Kind::Help;
  c.index = i;
  c.slices = o.slices;
  c.help_ns = trace::ms_to_ns(o.helper_compute);
  if (moves == Compute::SliceMoves::Real) {
    const sched::OpKind kind = ctx_.actions()[static_cast<std::size_t>(i)].kind;
    // W: one request, the answer lands after the op. F, B: one request per layer, each answer awaited inside the op
    // (nothing is due until the first layer's request). BW: its B half's as B's, then its W half's as W's.
    own.real = kind == sched::OpKind::W || kind == sched::OpKind::BW;
    if (kind != sched::OpKind::W) own.back = now;
    compute_.give_slices(
        o.slices,
        [this, i, c, helper = o.helper](std::vector<float> input, std::size_t answer) {
          Control request = c;
          request.bytes_out = static_cast<std::int64_t>(input.size() * sizeof(float));
          request.bytes_back = static_cast<std::int64_t>(answer * sizeof(float));
          post_help(i, helper, request, as_bytes(input));
          push_sends();  // before this rank computes its own part
        },
        [this, i] { return await_answer(i); });
  } else {
    const std::int64_t bytes = std::llround(o.bytes);
    c.bytes_out = (bytes + 1) / 2;  // SliceCosts gives both directions together: half out, half back
    c.bytes_back = std::max<std::int64_t>(1, bytes - c.bytes_out);  // at least the verdict's byte
    post_help(i, o.helper, c, std::vector<char>(static_cast<std::size_t>(c.bytes_out)));
  }
  peers_[static_cast<std::size_t>(o.helper)].engaged_until = now + trace::ms_to_ns(o.help_time);
  own.helper = o.helper;
  own.decided_at = now;
  own.slices = o.slices;
  own.own_share = o.owner_time / (estimate_ns / 1e6);
  own.estimate_ns = estimate_ns;
  compute_.keep_share(own.own_share);
  return o.op_time * 1e6;
}

// Owner, inside its F or B: the answer to the layer's request. Polls, and serves requests to this rank meanwhile
// (two ranks whose F each wait on the other's help would otherwise wait forever); the watchdog names a helper
// that never answers.
std::vector<float> MigrationPeer::await_answer(int i) {
  const Owned& own = owned_[static_cast<std::size_t>(i)];
  while (own.back < 0) {
    const std::size_t done = drain_(true);
    const bool served = serve();
    if (done == 0 && !served) sleep_until_ns(steady_now_ns() + 20'000);
    check_answers({i}, clock_.now_ns());
  }
  return as_floats(own.reply);
}

// The peers' messages queue up while this rank sleeps in an op, and each poll matches one per peer (its receive is
// re-posted after each), so one poll would decide on an old status or leave a help request behind statuses; and
// payloads move only while polled. So after the loop's poll (`first` completions) it polls both planes until
// nothing more completes: Open MPI's test-some progresses only on a call that finds nothing complete, so until
// two polls in a row find nothing. While idle (i < 0) it always does, and the loop looks again when anything
// came. Before launching action i only where it decides, a migration message came since the last catch-up, or a
// payload or an answer is on its way: those polls delay the op and count as control (timed with the messages
// they handle); where only the decision's statuses are wanted, they read the control plane alone.
bool MigrationPeer::catch_up(int i, std::size_t first) {
  const bool news = handled_ != handled_seen_;
  const bool moving = sends_ > 0 || answers_due_ > 0 || (!jobs_.empty() && !jobs_.back().payload_in);
  const auto gives = [&](const sched::Action& a) { return moves_of(ctx_.rank, a) != Compute::SliceMoves::None; };
  const bool deciding = i >= 0 && options_.forced.empty() && gives(ctx_.actions()[static_cast<std::size_t>(i)]);
  std::size_t completed = 0;
  const auto poll = [&](bool data) { completed += poll_until_quiet([&] { return drain_(data); }, first > 0 ? 0 : 1); };
  if (i < 0) {
    poll(true);
  } else if (deciding || news || moving) {
    const Timed timed(*this);
    poll(news || moving);  // for a decision's statuses alone, the control plane (data completions wait a poll)
  }
  handled_seen_ = handled_;
  return i < 0 ? completed > 0 : help_first();
}

// A help payload above the eager limit moves only while its sender polls (a rendezvous; and without a single-copy
// mechanism), so the sender polls for a moment before it sleeps in an op: long enough for an idle peer to take it,
// short enough not to wait out a peer that turned out busy.
void MigrationPeer::push_sends() {
  const std::int64_t deadline = clock_.now_ns() + 2'000'000;
  while (sends_ > 0 && plane_.last_poll() < deadline) drain_(true);
}

void MigrationPeer::reply(const Job& job, std::vector<char> answer) {
  buffers_.push_back(std::move(answer));
  plane_.post_send(Plane::Data, job.owner, help_tag(job.request.index, true), buffers_.back().data(),
                   buffers_.back().size(), Role::HelpSend, job.owner);
  ++sends_;
}

// How rank r's op a can give slices (its stage decides: e.g. only the last stage has vocabulary groups).
Compute::SliceMoves MigrationPeer::moves_of(int r, const sched::Action& a) const {
  return compute_.slice_moves(a.kind, ctx_.order.stage_of(r, a.chunk));
}

// The kind of request `job` is for the owner's op a: its own, but a BW's requests come as its B half's (per layer)
// and then one W half's; requests_left counts this one and those to come.
sched::OpKind MigrationPeer::request_kind(const Job& job, const sched::Action& a) const {
  if (a.kind != sched::OpKind::BW) return a.kind;
  return requests_left(job, a) > 1 ? sched::OpKind::B : sched::OpKind::W;
}

int MigrationPeer::requests_left(const Job& job, const sched::Action& a) const {
  const auto at = layers_due_.find(std::make_pair(job.owner, job.request.index));
  return at != layers_due_.end() ? at->second
                                 : compute_.requests_per_op(a.kind, ctx_.order.stage_of(job.owner, a.chunk));
}

// Real slices: computed with the trainer's kernels from the payload.
void MigrationPeer::compute_real(const Job& job, const sched::Action& a, std::vector<char>& answer) const {
  if (hang_helping_) std::raise(SIGSTOP);  // CONDUCTOR_INJECT_FAILURE=RANK:STEP:hang-help (fault tests)
  const std::vector<float> result =
      compute_.compute_slices(request_kind(job, a), static_cast<int>(job.request.slices), as_floats(job.payload));
  if (result.size() * sizeof(float) != answer.size()) {
    throw Error("migration: rank " + std::to_string(ctx_.rank) + " computed " + std::to_string(result.size()) +
                " floats for rank " + std::to_string(job.owner) + "'s " + sched::to_string(a) + " of step " +
                std::to_string(ctx_.step + 1) + ", which expects " + std::to_string(answer.size() / sizeof(float)));
  }
  answer = as_bytes(result);
}

// Answers the declined requests at once (the owner computes their slices after its share: it must not wait for
// this rank's next help to end too), then runs the oldest request that is not declined, once its payload is in (real
// slices: computes them; modelled: sleeps their time). A job leaves the queue once its payload is in: the
// payload's receive writes into it until then.
bool MigrationPeer::serve() {
  bool declined = false;
  for (Job& job : jobs_) {
    if (!job.declined || job.answered) continue;
    std::vector<char> answer(static_cast<std::size_t>(job.request.bytes_back));  // modelled: a stand-in
    if (!answer.empty()) answer.front() = kDeclined;
    reply(job, std::move(answer));
    job.answered = true;
    declined = true;
    ++ctx_.progress;
  }
  std::erase_if(jobs_, [](const Job& j) { return j.answered && j.payload_in; });
  if (declined) return true;
  const auto next = std::find_if(jobs_.begin(), jobs_.end(), [](const Job& j) { return !j.declined; });
  if (next == jobs_.end() || !next->payload_in) return false;
  Job job = std::move(*next);
  jobs_.erase(next);
  const sched::Action& a =
      ctx_.order.ranks[static_cast<std::size_t>(job.owner)][static_cast<std::size_t>(job.request.index)];
  std::vector<char> answer(static_cast<std::size_t>(job.request.bytes_back));  // modelled: a stand-in
  ++ctx_.progress;
  say_busy();
  const std::int64_t start = clock_.now_ns();
  if (moves_of(job.owner, a) == Compute::SliceMoves::Real) {
    compute_real(job, a, answer);
  } else {
    sleep_with_progress_until_ns(steady_now_ns() + job.request.help_ns, [this] { return keep_moving(); });
  }
  const std::int64_t end = clock_.now_ns();
  reply(job, std::move(answer));
  record_help(job, a, start, end);
  count_layer(job, a);
  return true;
}

// Real F and B ask once per layer, BW per layer and then for its W half: this rank keeps its own next op back until
// the owner's last request is served.
void MigrationPeer::count_layer(const Job& job, const sched::Action& a) {
  if (moves_of(job.owner, a) != Compute::SliceMoves::Real) return;
  const auto key = std::make_pair(job.owner, job.request.index);
  const int left = requests_left(job, a) - 1;
  if (left > 0) {
    layers_due_[key] = left;
  } else {
    layers_due_.erase(key);
  }
}

void MigrationPeer::record_help(const Job& job, const sched::Action& a, std::int64_t start, std::int64_t end) {
  trace::OpEvent e;
  e.step = ctx_.step;
  e.rank = ctx_.rank;
  e.stage = ctx_.order.stage_of(job.owner, a.chunk);
  e.chunk = a.chunk;
  e.microbatch = a.microbatch;
  e.kind = static_cast<trace::EventKind>(static_cast<int>(trace::EventKind::HELP_F) + static_cast<int>(a.kind));
  e.ready_ns = job.arrived;
  e.start_ns = start;
  e.end_ns = end;
  e.bytes = job.request.bytes_out + job.request.bytes_back;
  e.wait_ns = std::max<std::int64_t>(0, start - ctx_.last_end);
  e.peer = job.owner;
  e.migrated = static_cast<std::int16_t>(job.request.slices);
  ctx_.record(e);
}

void MigrationPeer::finish(int i, OpSpan& span) {
  Owned& own = owned_[static_cast<std::size_t>(i)];
  const sched::Action& a = ctx_.actions()[static_cast<std::size_t>(i)];
  if (own.real) {
    compute_.land_slices(a, ctx_.order.stage_of(ctx_.rank, a.chunk), as_floats(own.reply));
    own.real = false;
  }
  if (own.declined) {
    // The helper was busy after all: the owner computes the slices it sent, at its share's rate; with every slice
    // sent (no share: kept 0, and 1 / 0 slept for ever, the pipeline deadlocked) at the op's modelled time.
    const std::int64_t kept = span.end_ns - span.start_ns;
    const double slices_ns =
        own.own_share > 1e-9 ? static_cast<double>(kept) * (1.0 / own.own_share - 1.0) : own.estimate_ns;
    sleep_until_ns(steady_now_ns() + std::llround(slices_ns));
    span.end_ns = steady_now_ns();
    own.back = clock_.to_common(span.end_ns);
    slices_given_ -= own.slices;  // they stayed here after all
    ++declined_;
    own.slices = 0;
    own.own_share = 1.0;
    own.declined = false;
  }
}

void MigrationPeer::check_answers(const std::vector<int>& in_flight, std::int64_t now) const {
  for (int i : in_flight) {
    const Owned& own = owned(i);
    if (own.helper < 0 || own.back >= 0 || !watchdog_.expired(own.decided_at, now)) continue;
    const sched::Action& a = ctx_.actions()[static_cast<std::size_t>(i)];
    watchdog_.fire("the answer of helper rank " + std::to_string(own.helper) + " to its " + sched::to_string(a.kind) +
                       " of microbatch " + std::to_string(a.microbatch) + " (stage " +
                       std::to_string(ctx_.order.stage_of(ctx_.rank, a.chunk)) + ", " + std::to_string(own.slices) +
                       " slices) in step " + std::to_string(ctx_.step + 1),
                   static_cast<double>(now - own.decided_at) * 1e-9, own.helper);
  }
}

}  // namespace conductor::runtime
