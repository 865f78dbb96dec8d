#pragma once
// One step's messages on the two planes (executor.hpp describes them). Every transfer posted is filed under its
// role and the action (or peer) it serves, so one poll of both transports says what completed and for what. The
// per-transfer control messages live here: the header a producer sends when its op ends, the announcement it
// sends when its op starts (backfilling, migration), and an input's arrival: header and tensor in, held until
// the header's ready time, then handed to the driver. Computation migration's messages (MigrationPeer) are
// filed here too and handed back to the executor, as are the completions of sends.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/sched/driver.hpp"
#include "conductor/trace/event.hpp"

namespace conductor::runtime {

constexpr std::int64_t kUnknown = INT64_MIN;  // an announced time nobody knows (nothing measured, not started)

// What the parts of one step share: the schedule, the driver, the trace and the watchdog's progress count.
struct StepContext {
  StepContext(int step, int rank, const sched::Schedule& order, sched::RankDriver& driver, std::int64_t begin)
      : step(step), rank(rank), order(order), driver(driver), begin(begin), last_end(begin) {}
  int step;
  int rank;
  const sched::Schedule& order;
  sched::RankDriver& driver;
  StepOutcome outcome;
  std::int64_t begin;         // the step's start (common clock)
  std::int64_t last_end;      // the end of this rank's latest op or help (the next event's wait)
  std::int64_t progress = 0;  // events that move the step on (an input half in, an op launched or retired, ...)

  const std::vector<sched::Action>& actions() const { return order.ranks[static_cast<std::size_t>(rank)]; }
  const sched::Arbiter& state() const { return driver.arbiter(); }
  // The driver's clock: ns since the step began, as a double (exact below 2^53 ns, about 104 days).
  double since_begin(std::int64_t t) const { return static_cast<double>(t - begin); }
  // The index of the op on this rank that produces input `in` (a local one).
  int producer_of(const sched::Transfer& in) const;
  // Appends an op or help event that ended at e.end_ns.
  void record(const trace::OpEvent& e);
};

// A SEND (on the producing rank), RECV or ANNOUNCE (on the consuming rank) event of one transfer.
trace::OpEvent transfer_event(int step, int rank, trace::EventKind kind, const sched::Transfer& t, std::int64_t start,
                              std::int64_t end, std::int64_t bytes);

enum class Plane { Control, Data };
// Header, Announcement: the control plane's per-transfer messages; Tensor: the data; Control: a migration
// status or request (action = the peer); HelpPayload (action = the owner), HelpReply (the owner's op),
// HelpSend (a payload out or back): migration's data.
enum class Role { Header, Tensor, Announcement, Control, HelpPayload, HelpReply, HelpSend };
struct Completion {
  Role role;
  int action;
  bool send;
};

// Calls poll_once until two calls in a row complete nothing (at most 64 calls; `quiet` of those two already
// seen), returning how many completed. Open MPI's MPI_Testsome progresses arrivals only when none of its requests
// is complete, so one poll after an op often returned the rank's own finished sends and left an input (or a
// peer's status) that came during the op unseen. The executor's loop and MigrationPeer::catch_up both poll so.
std::size_t poll_until_quiet(const std::function<std::size_t()>& poll_once, int quiet = 0);

class ControlPlane {
 public:
  // The per-transfer control message (executor.hpp): [ready_at on the common clock][reserved].
  struct Header {
    std::int64_t ready_at_ns = 0;
    std::int64_t reserved = 0;
  };
  // The announcement, sent when the producing op starts.
  struct Announcement {
    std::int64_t expected_ns = 0;  // when the input is expected to be usable; kUnknown when nothing was measured
    std::int64_t start_ns = 0;     // when the producing op started
  };

  // announce_inputs: producers announce their cross-rank outputs; comm_events: RECV/ANNOUNCE events are traced
  // (of tensor_bytes each).
  ControlPlane(StepContext& ctx, Transport& control, Transport& data, const CommonClock& clock, bool announce_inputs,
               bool comm_events, std::int64_t tensor_bytes);
  ControlPlane(const ControlPlane&) = delete;
  ControlPlane& operator=(const ControlPlane&) = delete;

  // Unique per (direction, receiving stage, microbatch) within a step; steps never overlap because every
  // receive of a step completes before the step ends.
  static int tag_of(const sched::Schedule& s, const sched::Transfer& t);
  static int announce_tag_of(const sched::Schedule& s, const sched::Transfer& t);  // above every header tag

  void post_send(Plane plane, int peer, int tag, const void* buffer, std::size_t bytes, Role role, int action);
  void post_recv(Plane plane, int peer, int tag, void* buffer, std::size_t bytes, Role role, int action);
  // Posts the receives of action i's remote input: header, announcement, and the tensor into `tensor` (nullptr:
  // stand-ins, the header is the whole message).
  void expect_input(int i, float* tensor, std::size_t tensor_bytes);
  // Producer: action i (output `out`) started at `now` and is expected to be usable there at expected_ns.
  void announce(int i, const sched::Transfer& out, std::int64_t expected_ns, std::int64_t now);
  // Producer: action i's output is usable from ready_at_ns on.
  void send_header(int i, const sched::Transfer& out, std::int64_t ready_at_ns);
  // Consumer: an announcement reaches the driver latency_ns after its producing op began (not before), the
  // latency the simulator gives it (the cost model's comm time where transfers take the modelled time, emulated;
  // 0 where they take their real time). Migration learns of it on receipt, as in the simulator. Default 0.
  void hold_announcements(std::int64_t latency_ns) { announce_latency_ns_ = latency_ns; }

  // Polls both transports; a received header, announcement or tensor is handled here (an input that becomes
  // usable reaches the driver), every other completion goes to `other`, in the order of completion (control
  // plane first); then inputs held until a ready time now passed reach the driver. Returns how many completed.
  // data = false: the control plane only (a migration decision's fresh statuses; the data waits for the next poll).
  std::size_t poll(const std::function<void(const Completion&)>& other, bool data = true);
  std::int64_t last_poll() const { return now_; }  // the time of the latest poll (common clock)
  std::size_t pending() const { return control_.pending() + data_.pending(); }
  // The ranks this rank's pending sends go to, ascending: whom a rank that cannot finish its sends waits for.
  std::vector<int> pending_send_peers() const;
  std::size_t pending_control() const { return control_.pending(); }
  std::size_t pending_data() const { return data_.pending(); }
  // Inputs that arrived before their injected ready time wait, as do announcements within their latency: the
  // earliest such time (INT64_MAX: none).
  bool holds_delayed() const { return !delayed_.empty() || !held_announcements_.empty(); }
  std::int64_t next_release() const {
    return std::min(delayed_.empty() ? INT64_MAX : delayed_.top().first,
                    held_announcements_.empty() ? INT64_MAX : held_announcements_.top().first);
  }

  bool arrived(int i) const { return arrived_[static_cast<std::size_t>(i)] != 0; }  // both halves in
  // The announced arrival of action i's input (kUnknown when none came, or it said unknown).
  std::int64_t announced_arrival(int i) const;
  // When action i's output is expected at its consumer, as this rank announced it (kUnknown: not announced).
  std::int64_t own_announcement(int i) const { return out_announce_[static_cast<std::size_t>(i)].expected_ns; }

 private:
  struct Pending {
    Role role;
    int action;
    bool send;
    int peer;
  };
  void file(const std::vector<TransferId>& done, std::unordered_map<TransferId, Pending>& ids,
            const std::function<void(const Completion&)>& other);
  void half_arrived(int i, Role role, std::int64_t now);
  void accept(int i, std::int64_t when);
  void announced(int i, std::int64_t now);
  void tell_driver(int i, std::int64_t when);  // announcement i reaches the driver at `when`
  void release_announcements(std::int64_t now);

  StepContext& ctx_;
  Transport& control_;
  Transport& data_;
  const CommonClock& clock_;
  bool announce_inputs_;
  bool comm_events_;
  std::int64_t tensor_bytes_;
  std::unordered_map<TransferId, Pending> control_ids_, data_ids_;  // each transport numbers its own transfers
  std::vector<Header> in_header_, out_header_;
  std::vector<Announcement> in_announce_, out_announce_;
  std::vector<char> header_in_, tensor_in_, arrived_, announce_known_, announce_held_;
  using Delayed = std::pair<std::int64_t, int>;  // (ready_at, action)
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<Delayed>> delayed_;
  std::int64_t announce_latency_ns_ = 0;
  std::priority_queue<Delayed, std::vector<Delayed>, std::greater<Delayed>> held_announcements_;  // (due, action)
  std::int64_t now_ = 0;
};

}  // namespace conductor::runtime
