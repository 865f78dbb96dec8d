#pragma once
// One rank's part in computation migration during one step (executor.hpp, "Computation migration";
// docs/migration.md, "In the runtime"): what it tells its peers (Idle, Busy, Finished), what it knows of them,
// the owner's side (the decision, the request and payload, the helper's answer and its watchdog) and the
// helper's side (requests queued, served between its own ops). Its messages go through the step's ControlPlane:
// control messages on one tag above the announcements, payloads above every tensor tag.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/control_plane.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/sched/migration.hpp"

namespace conductor::runtime {

class MigrationPeer {
 public:
  // The owner's record of one of its ops: the helper it gave slices to (-1: none), when it decided (the op's
  // start in the trace), the answer's arrival, and the share of the op's time it kept.
  struct Owned {
    int helper = -1;
    int slices = 0;
    double own_share = 1.0;
    double estimate_ns = 0;  // the op alone by the cost model, at the decision
    std::int64_t decided_at = INT64_MAX;
    std::int64_t back = -1;  // the answer's arrival (common clock); -1 while due
    bool real = false;       // the answer carries real slices to land
    bool declined = false;   // the helper turned out busy: the owner computes the slices itself
    std::vector<char> reply;
  };

  // drain: the executor's poll of both planes (payloads move only while their sender polls), or (data = false) of
  // the control plane alone.
  // estimate_ms: rank r's op alone by the cost model (ms); comm_ms: a transfer's estimate. With the peers' last
  // statuses they bound a peer's awaited input (sched::InputChains, as the simulator does).
  using Estimate = std::function<double(int r, const sched::Action& a)>;
  MigrationPeer(StepContext& ctx, ControlPlane& plane, Compute& compute, const CommonClock& clock,
                const ExecutorOptions& options, const Watchdog& watchdog, std::function<std::size_t(bool data)> drain,
                Estimate estimate_ms, double comm_ms);
  ~MigrationPeer();
  MigrationPeer(const MigrationPeer&) = delete;
  MigrationPeer& operator=(const MigrationPeer&) = delete;

  // A completion filed under Control, HelpPayload, HelpReply or HelpSend.
  void handle(const Completion& c, std::int64_t now);
  // Tells the peers this rank is busy (it starts an op or a help) when it last said otherwise.
  void say_busy();
  // Idle: with no op of its own in flight, tells the peers what its next op waits for (or that its step is done).
  void say_idle(bool ops_in_flight);
  // After the loop's poll found `first` completions, before it launches action i (or waits: i < 0): polls until
  // nothing more completes where a decision may need the peers' latest statuses, a help request may wait behind
  // statuses, or payloads move. True when the loop should look again (waiting: anything came; launching: a help
  // request came that runs first).
  bool catch_up(int i, std::size_t first);
  // Owner: decides for action i starting at `now` (estimated `estimate_ns` alone); on a helper, sends the request
  // and its payload (modelled: at once; real: the slices' inputs, when the op's compute has them), posts the
  // reply's receive and keeps the owner's share. Returns the op's predicted duration (ns).
  double offload(int i, std::int64_t now, double estimate_ns);
  // Polls for a moment while payloads this rank sent are on their way, before it sleeps in an op.
  void push_sends();
  // Helper: runs the oldest request whose payload is in, answers and records a HELP_* event; false if none.
  bool serve();
  // A help was accepted while idle: it runs before this rank's next op (its payload is on its way); or an F, B or
  // BW served here has requests still to come (the owner waits for each: its next request comes within a layer).
  bool help_first() const {
    return std::any_of(jobs_.begin(), jobs_.end(), [](const Job& j) { return !j.declined; }) || !layers_due_.empty();
  }
  // Every peer said Finished, this rank did, and every help it was asked for is served.
  bool over() const;

  const Owned& owned(int i) const { return owned_[static_cast<std::size_t>(i)]; }
  bool answer_due(int i) const { return owned(i).helper >= 0 && owned(i).back < 0; }
  // Owner: action i's own part ended (span, steady clock) and its answer is in: lands real slices; a declined
  // help is computed here (the span grows by the slices' time at the own share's rate).
  void finish(int i, OpSpan& span);
  // A help whose answer has not come within the watchdog's limit ends the run naming the helper.
  void check_answers(const std::vector<int>& in_flight, std::int64_t now) const;
  // StepOutcome::migration_control_ns and slices_given of this step so far.
  std::int64_t control_ns() const { return control_ns_; }
  int slices_given() const { return slices_given_; }
  int declined() const { return declined_; }  // this rank's ops whose helper declined (their slices stayed here)
  int decisions() const { return decisions_; }
  int statuses_sent() const { return statuses_sent_; }  // Idle, Busy, Finished: one per peer told

 private:
  enum class Kind : std::int64_t { Idle = 1, Busy = 2, Finished = 3, Help = 4 };
  static constexpr char kDeclined = 1;  // a modelled reply's first byte: the helper declined (0: it served)
  // The 56-byte control message (executor.hpp), in order per pair of ranks.
  struct Control {
    Kind kind = Kind::Busy;
    std::int64_t index = -1;           // Help: the op's position in the owner's list; Idle: the next op's
    std::int64_t slices = 0;           // Help
    std::int64_t help_ns = 0;          // Help: the slices' modelled time on the helper
    std::int64_t bytes_out = 0;        // Help: payload owner -> helper
    std::int64_t bytes_back = 0;       // Help: payload helper -> owner
    std::int64_t until_ns = kUnknown;  // Idle: announced arrival of the awaited input (kUnknown: none)
    // Idle, Finished: M_F this rank may still hold (its memory limit less its ops' memory in use; infinite
    // without a limit), what the simulator's offers carry (HelpOffer::memory_free): without it a helper whose
    // activations filled its memory was offered slices the simulator never gives it (gpipe, p = 2).
    double memory_free = std::numeric_limits<double>::infinity();
  };
  // What an owner knows of a peer: its last status, and until when it helps this rank.
  struct PeerView {
    Kind status = Kind::Busy;
    std::int64_t until_ns = kUnknown;
    int next = -1;  // Idle: its next op's position in its list
    std::int64_t engaged_until = INT64_MIN;
    double memory_free = std::numeric_limits<double>::infinity();  // Idle, Finished: Control::memory_free
  };
  // A help request on the helper: its payload, then its slices' work.
  struct Job {
    int owner = -1;
    Control request;
    std::vector<char> payload;
    bool payload_in = false;
    bool declined = false;  // it came while this rank ran its own ops: the payload goes straight back
    bool answered = false;  // declined and answered: it waits only for its payload's receive
    std::int64_t arrived = 0;
  };

  class Timed;
  bool decides(int q) const;
  // While this rank sleeps (in an op or a modelled help): polls as long as payloads it sent or answers it awaits
  // are outstanding; false once none is.
  bool keep_moving();
  int control_tag() const;
  int help_tag(std::int64_t index, bool back) const;
  void post_control_recv(int q);
  void send_control(int q, const Control& c);
  void broadcast(const Control& c, int skip = -1);
  void on_control(int q, std::int64_t now);
  void payload_in(int owner);
  std::int64_t own_delivery(int q, int next, int deciding) const;
  double memory_free() const;  // Control::memory_free of this rank now
  void build_offers(std::int64_t now, int deciding);
  sched::Offload choose(int i, std::int64_t now, double estimate_ns);
  void post_help(int i, int helper, const Control& c, std::vector<char> payload);
  void reply(const Job& job, std::vector<char> answer);
  std::vector<float> await_answer(int i);
  void count_layer(const Job& job, const sched::Action& a);
  Compute::SliceMoves moves_of(int r, const sched::Action& a) const;
  int requests_left(const Job& job, const sched::Action& a) const;
  sched::OpKind request_kind(const Job& job, const sched::Action& a) const;
  void compute_real(const Job& job, const sched::Action& a, std::vector<char>& answer) const;
  void record_help(const Job& job, const sched::Action& a, std::int64_t start, std::int64_t end);

  StepContext& ctx_;
  ControlPlane& plane_;
  Compute& compute_;
  const CommonClock& clock_;
  const ExecutorOptions& options_;
  const Watchdog& watchdog_;
  std::function<std::size_t(bool data)> drain_;
  sched::InputChains chains_;   // the producer chain of each list op's cross-rank input
  sched::PeerKnowledge known_;  // what this rank knows of its peers, for chains_ (build_offers)
  int deciding_ = -1;           // the op build_offers decides for
  bool hang_helping_;           // CONDUCTOR_INJECT_FAILURE=RANK:STEP:hang-help names this rank and step

  std::vector<Control> control_in_;        // per peer
  std::deque<Control> control_out_;        // send buffers, alive until the step's sends drained
  std::deque<std::vector<char>> buffers_;  // payloads sent (out or back), same
  std::vector<PeerView> peers_;
  std::deque<Job> jobs_;  // requests to this rank, in arrival order
  std::vector<Owned> owned_;
  std::vector<sched::HelpOffer> offers_;
  int peers_finished_ = 0;
  // The owners' F, B and BW this rank helps with ((owner, list position)) and their requests still to come.
  std::map<std::pair<int, std::int64_t>, int> layers_due_;
  int sends_ = 0;        // payloads (out or back) posted and not yet complete
  int answers_due_ = 0;  // helpers' answers this rank waits for
  Control sent_status_;  // the last status this rank sent: what its peers hold of it
  bool busy_ = true;     // it started an op or a help since it last was idle (a Busy may be left unsent)
  bool finished_sent_ = false;
  std::vector<char> listens_;  // per peer: it decides, so it reads this rank's Idle and Busy
  int statuses_sent_ = 0;
  long handled_ = 0, handled_seen_ = 0;  // migration completions handled, and as of the last catch_up
  bool timing_ = false;                  // a Timed scope is open
  std::int64_t control_ns_ = 0;          // see control_ns()
  int slices_given_ = 0;
  int declined_ = 0;
  int decisions_ = 0;
};

}  // namespace conductor::runtime
