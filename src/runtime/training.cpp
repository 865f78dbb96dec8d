#include "conductor/runtime/training.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include "collective.hpp"
#include "conductor/model/checkpoint.hpp"
#include "conductor/model/optimizer.hpp"
#include "conductor/model/stage.hpp"
#include "conductor/runtime/checkpointing.hpp"
#include "conductor/runtime/clock.hpp"
#include "conductor/runtime/compute.hpp"
#include "conductor/runtime/evaluation.hpp"
#include "conductor/runtime/executor.hpp"
#include "conductor/runtime/fault_injection.hpp"
#include "conductor/runtime/numerics.hpp"
#include "conductor/runtime/run_report.hpp"
#include "conductor/runtime/stop_signal.hpp"
#include "conductor/runtime/transport.hpp"
#include "conductor/runtime/watchdog.hpp"
#include "conductor/sched/cost.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/planner.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/sim/noise.hpp"
#include "conductor/sim/simulator.hpp"
#include "conductor/sim/summary_json.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"
#include "conductor/version.hpp"

namespace conductor::runtime {

namespace {

// Every rank trains on the same tokens (README): the data files each rank opened (its own expansion of data.path
// and data.valid_path, each file's size and CRC-32) against rank 0's, so that a node's stale copy, or a glob
// expanded while shards were being written, is refused before the first step instead of feeding one stage's
// inputs and another's targets from different tokens. InputError on the rank that differs.
void check_same_data(const std::vector<model::DataFileIdentity>& mine, const std::string& keys, int rank, MPI_Comm comm,
                     const Watchdog& watchdog) {
  // The checkpoint manifest's data lines: one record of a data file for both.
  std::string here;
  for (const model::DataFileIdentity& f : mine) here += model::data_file_line(f) + '\n';
  const std::string theirs =
      watched_broadcast_text(watchdog, rank == 0 ? here : std::string(), comm, "rank 0's list of data files");
  if (rank == 0 || theirs == here) return;
  std::vector<model::DataFileIdentity> files;
  std::istringstream in(theirs);
  for (std::string line; std::getline(in, line);) {
    model::DataFileIdentity f;
    if (!model::parse_data_file_line(line, f))
      throw Error("rank 0's list of data files: unreadable line '" + line + "'");
    files.push_back(std::move(f));
  }
  std::string said;
  for (const std::string& d : model::data_differences(files, mine, "rank 0")) said += (said.empty() ? "" : "; ") + d;
  throw InputError(keys + ": rank " + std::to_string(rank) + " does not read the data files rank 0 reads (" +
                   (said.empty() ? std::string("the same files in another order") : said) + "; 'now' is rank " +
                   std::to_string(rank) +
                   ", 'then' rank 0): every rank must see the same "
                   "files (a node's stale copy, or shards written while the run expanded its glob)");
}

// The order of a step travels from rank 0 as the schedule's text form: the one representation every layer
// reads.
sched::Schedule broadcast_order(const sched::Schedule* order, int rank, MPI_Comm comm) {
  std::string text = mpi::broadcast_text(rank == 0 ? sched::to_text(*order) : std::string(), comm);
  if (rank == 0) return *order;
  sched::Schedule s = sched::parse_text(text, "order from rank 0");
  s.name = order ? order->name : s.name;
  return s;
}

std::vector<std::string> gather_hostnames(int rank, int size, MPI_Comm comm) {
  char name[MPI_MAX_PROCESSOR_NAME] = {0};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<std::size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0, comm);
  std::vector<std::string> hosts;
  if (rank == 0) {
    for (int r = 0; r < size; ++r) hosts.emplace_back(&all[static_cast<std::size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
  }
  return hosts;
}

// Fault injection for the tests of the failure paths (fault_injection.hpp): throw or die at the start of a step.
void maybe_inject_failure(int rank, int step) {
  const InjectedFailure how = injected_failure(rank, step);
  if (how == InjectedFailure::Kill) std::raise(SIGKILL);
  if (how == InjectedFailure::Throw)
    throw Error("injected failure on rank " + std::to_string(rank) + " at step " + std::to_string(step) +
                " (CONDUCTOR_INJECT_FAILURE)");
}

// Whether this node runs more ranks than it has cores (the executor then yields instead of spinning).
bool node_oversubscribed(int rank, MPI_Comm comm) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int local_ranks = 1;
  MPI_Comm_size(node, &local_ranks);
  MPI_Comm_free(&node);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  return static_cast<unsigned>(local_ranks) > cores;
}

ExecutorOptions executor_options(const plan::Plan& plan, const sched::Schedule& order, int rank, MPI_Comm comm) {
  ExecutorOptions eo;
  eo.execution = sched::parse_execution(plan.schedule.execution);
  eo.hint = sched::parse_hint(plan.schedule.hint);
  eo.wide_spread = plan.schedule.wide_spread;
  eo.memory_limit = sched::rank_memory_limits(plan, order).at(static_cast<std::size_t>(rank));  // this rank's own
  eo.memory_after_b = plan.costs.memory_after_b;
  eo.comm_events = plan.trace.comm_events;
  eo.inject_full_comm_time = plan.backend == "emulated";
  eo.watchdog_s = plan.runtime.watchdog_s;
  eo.oversubscribed = node_oversubscribed(rank, comm);
  // The deck's check lets migration through on the emulated and cpu backends (schema_migration.cpp).
  if (plan.migration.enabled) eo.migration = sched::Migration(plan.migration, plan.costs, rank, order.v);
  eo.forced = plan.migration.force;
  return eo;
}

// One run of `conductor run` on one rank: set up in the constructor (every input checked collectively before
// anything is written), then steps until run.steps, a stop signal or a non-finite step, then the report.
class Training {
 public:
  Training(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner);
  RunOutcome run();

 private:
  enum class After { Continue, Stop };
  // What the global numbers say about a step's update, the same on every rank.
  struct Judgement {
    NonfiniteGuard::Verdict verdict = NonfiniteGuard::Verdict::Update;
    double norm = 0.0;     // the global gradient norm
    bool clipped = false;  // an update whose clipping scale is not 1
  };
  // A step whose optimistic update is done and whose check is in flight (post-validation).
  struct Posted {
    int step = 0;
    StepReducer::Pending pending;
    std::vector<trace::OpEvent> events;  // this rank's (rank 0 only, once shipped)
    double peaks[2] = {0, 0};            // this rank's peak activations (M_F) and bytes
    std::int64_t known_ns = -1;          // when this rank saw the check complete (common clock)
  };
  // Post-validation: a rank's events and peaks of a step on their way to rank 0.
  struct Shipment {
    double head[3] = {0, 0, 0};  // events, peak activations, peak bytes
    std::vector<trace::OpEvent> events;
    std::vector<MPI_Request> requests;
  };
  void plan_first_order(const sched::PlannerFactory& make_planner);
  void open_data_plane();
  After step_synchronously(int step);
  StepOutcome run_step(int step);
  void run_post_validated();
  Judgement judge(const StepNumbers& numbers, int step);
  After conclude(int step, const StepNumbers& numbers, NonfiniteGuard::Verdict verdict, std::vector<trace::OpEvent> all,
                 const std::vector<double>& peaks);
  void record(int step, const StepNumbers& numbers, NonfiniteGuard::Verdict verdict,
              const std::vector<trace::OpEvent>& all, const std::vector<double>& peaks, double loss, double valid_loss);
  void post(int step, StepOutcome so);
  void count_migration(const StepOutcome& so);
  After settle(bool& rolled_back);
  bool overlaps_next(int step) const;
  void ship_events(int step, Posted& posted);
  void collect_events(const Posted& posted, std::vector<trace::OpEvent>& all, std::vector<double>& peaks);
  void gather_step(int step, std::vector<trace::OpEvent> mine, const double (&my_peaks)[2],
                   std::vector<trace::OpEvent>& all, std::vector<double>& peaks);
  void receive_rows(int step, int tag, std::vector<trace::OpEvent> mine, const double (&my_peaks)[2],
                    std::vector<trace::OpEvent>& all, std::vector<double>& peaks);
  void drain_shipments();
  void report_reruns();
  void report_backup_size();
  void checkpoint_if_due(int step, bool stopping, bool last);
  bool asks_to_stop() const;
  void check_deferred_errors();
  std::string record_error_;  // rank 0: why a step's record (trace, metrics) could not be written
  void replan(int step, std::vector<trace::OpEvent> all);
  void finish();

  const plan::Plan& plan_;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  RunOutcome outcome_;
  bool replanning_ = false;
  std::unique_ptr<sched::OrderPlanner> planner_;  // rank 0
  std::optional<sched::PlanAhead> ahead_;         // rank 0, replanning: the global tier's loop (a planner thread)
  sched::Schedule order0_;                        // rank 0: the order the next broadcast sends
  sched::Schedule order_;                         // the order every rank runs
  double memory_limit_ = 0;
  std::optional<sim::NoiseModel> noise_;
  std::optional<CommonClock> clock_;
  std::unique_ptr<Compute> compute_;
  bool has_math_ = false;            // the backend computes losses and gradients (an emulated one only sleeps)
  std::optional<RunReport> report_;  // rank 0
  int first_step_ = 0;
  std::optional<mpi::DupComm> control_comm_, data_comm_;
  std::optional<MpiTransport> control_;
  std::unique_ptr<Transport> data_;
  std::string data_transport_;
  std::optional<Executor> executor_;
  std::optional<Watchdog> watchdog_;   // a step's waits: bounded by the steps so far (Watchdog::bound_by_steps)
  std::optional<Watchdog> unbounded_;  // the waits outside steps (a checkpoint, a validation): runtime.watchdog_s
  double slowest_step_s_ = 0;          // this rank's slowest step so far, wall time of its ops
  std::optional<StepReducer> reducer_;
  std::optional<NonfiniteGuard> nonfinite_;
  std::size_t backup_bytes_ = 0;  // post-validation's copy of weights, AdamW moments and gradients on this rank
  std::unique_ptr<Posted> posted_;
  std::optional<mpi::DupComm> trace_comm_;  // post-validation: events to rank 0, point to point
  std::deque<Shipment> shipments_;
  std::vector<std::pair<int, int>> reruns_;  // (step rerun, ops of its discarded attempt begun before the check)
};

Training::Training(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner)
    : plan_(plan), comm_(comm), replanning_(static_cast<bool>(make_planner)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  install_stop_handlers();
  // The set-up's agreements (the model and data files loaded, the checkpoint resumed, the folders written) are
  // under runtime.watchdog_s as the steps' are: a rank stopped or hung there (a file system, a signal) ends the
  // run after that limit with a message, instead of leaving every other rank blocked in MPI for ever.
  Watchdog::open_channel(comm);  // one watchdog message per job, whichever ranks time out
  unbounded_.emplace(plan.runtime.watchdog_s, rank_);
  outcome_.output_dir = plan.run.output;
  plan_first_order(make_planner);
  memory_limit_ = sched::memory_limit_for(plan, order_);
  noise_.emplace(sim::NoiseModel::from_plan(plan, order_));
  clock_.emplace(comm);
  const std::vector<std::string> hosts = gather_hostnames(rank_, size_, comm);

  collectively(comm, kExitUsage, *unbounded_, "every rank's set-up (its model and data files)", [&] {
    compute_ = make_compute(plan, order_, rank_, *noise_, comm);
    if (injected_failure(rank_, 0) == InjectedFailure::HangSetup) std::raise(SIGSTOP);
  });
  has_math_ = compute_->payload_floats() > 0;
  // A data file truncated under the run: the rank that reads it asks the step to stop and every rank ends with its
  // message after the step (check_deferred_errors), instead of that rank throwing while its peers wait on it.
  if (compute_->model()) compute_->model()->data().defer_read_errors();
  if (compute_->model()) {
    collectively(comm, kExitUsage, *unbounded_, "every rank's data files", [&] {
      check_same_data(compute_->model()->data().files(),
                      plan.data.valid_files.empty() ? "data.path" : "data.path / data.valid_path", rank_, comm,
                      *unbounded_);
    });
  }
  // Checkpoints (runtime/checkpointing.hpp): checked and loaded collectively before anything runs.
  // The resume's checks (its step, the data files it recorded) before checkpoint.path is probed and locked: a
  // refused resume left a new checkpoint.path created, holding a lock file (README: nothing is created before
  // every input has passed its checks). Reading a step needs no lock: steps and `latest` move by renames.
  Resumed resumed;
  if (!plan.checkpoint.resume.empty()) resumed = resume_from_checkpoint(plan, compute_->model(), comm, *unbounded_);
  if (compute_->model() && !plan.checkpoint.path.empty()) probe_checkpoint_path(plan, comm, *unbounded_);
  first_step_ = resumed.step;
  outcome_.first_step = first_step_;
  // Only now, with the deck and every input checked on every rank, rank 0 writes into the run folder (the
  // command checked beforehand that it holds no other run's results and can be written).
  collectively(comm, kExitUsage, *unbounded_, "rank 0's start of the run folder", [&] {
    if (rank_ == 0) report_.emplace(plan, order_, size_, first_step_, hosts, has_math_);
  });
  open_data_plane();
  watchdog_.emplace(plan.runtime.watchdog_s, rank_);
  reducer_.emplace(*compute_, order_.num_stages(), comm);
  nonfinite_.emplace(plan.optim.skip_nonfinite_steps, order_.rank_of(order_.num_stages() - 1),
                     resumed.skipped_nonfinite);
  trace_comm_.emplace(comm);  // each step's events and peaks to rank 0, point to point
}

// The schedule is generated (or loaded from file and validated) on rank 0 and travels as text.
void Training::plan_first_order(const sched::PlannerFactory& make_planner) {
  collectively(comm_, kExitUsage, [&] {
    if (rank_ != 0) return;
    if (!replanning_ && plan_.scheduler.kind != "static")
      throw InputError("scheduler.kind = '" + plan_.scheduler.kind +
                       "' needs its planner (the conductor command wires it in)");
    const sched::Schedule generated = sched::make_schedule(plan_);
    planner_ = replanning_ ? make_planner(generated) : std::make_unique<sched::StaticPlanner>(generated);
    if (replanning_) ahead_.emplace(*planner_, plan_.run.steps, sched::PlanAhead::Threading::Background);
    order0_ = planner_->initial_order();
  });
  order_ = broadcast_order(rank_ == 0 ? &order0_ : nullptr, rank_, comm_);
}

// Two planes on communicators of their own: readiness headers (host MPI) and tensors (MPI, NCCL or host-staged
// device copies), so neither ever matches the other's messages nor the run's collectives.
void Training::open_data_plane() {
  const ExecutorOptions eo = executor_options(plan_, order_, rank_, comm_);
  control_comm_.emplace(comm_);
  data_comm_.emplace(comm_);
  control_.emplace(control_comm_->get());
  collectively(comm_, kExitFailure, [&] {
    data_ = make_data_transport(plan_, order_, rank_, *compute_, data_comm_->get(), data_transport_);
  });
  executor_.emplace(rank_, *control_, *data_, *compute_, *clock_, *noise_, eo);
  if (rank_ != 0) return;
  log::info("conductor run: " + plan_.run.name + ", " + std::to_string(size_) + " ranks, schedule " +
            plan_.schedule.kind + " (" + plan_.schedule.execution +
            (eo.execution == sched::Execution::Readiness ? ", hint " + plan_.schedule.hint : "") + "), backend " +
            plan_.backend + " (tensors over " + data_transport_ + "), " + std::to_string(order_.m) +
            " microbatches, steps " + std::to_string(first_step_ + 1) + ".." + std::to_string(plan_.run.steps) +
            " (counted from 1, as the step lines)");
}

RunOutcome Training::run() {
  if (plan_.schedule.post_validation) {
    run_post_validated();
    report_reruns();
    report_backup_size();
  } else {
    for (int step = first_step_; step < plan_.run.steps; ++step) {
      if (step_synchronously(step) == After::Stop) break;
    }
  }
  steps_over();
  check_deferred_errors();  // a record of the last step that failed has no next step to stop
  finish();
  // Every rank at the end, under the watchdog: one stopped after its last step left the others in MPI_Finalize
  // (which waits for every rank) with no message.
  if (injected_failure(rank_, plan_.run.steps) == InjectedFailure::HangEnd) std::raise(SIGSTOP);
  MPI_Request all_done;
  MPI_Ibarrier(comm_, &all_done);
  watchdog_->wait(all_done, "every rank to end the run (the results are written)");
  return outcome_;
}

// Runs the step's ops; its wall time bounds the watchdog of the steps after it (and of its own end-of-step waits).
StepOutcome Training::run_step(int step) {
  const std::int64_t begin = steady_now_ns();
  StepOutcome so = executor_->run_step(step, order_);
  slowest_step_s_ = std::max(slowest_step_s_, static_cast<double>(steady_now_ns() - begin) * 1e-9);
  watchdog_->bound_by_steps(slowest_step_s_, plan_.runtime.watchdog_steps);
  executor_->bound_watchdog(slowest_step_s_, plan_.runtime.watchdog_steps);
  return so;
}

// One reduction carries the gradient norm, the loss and whether anyone was asked to stop; every rank gets the
// same numbers, so every rank takes the same decision on a non-finite step without another message.
Training::Judgement Training::judge(const StepNumbers& numbers, int step) {
  Judgement j;
  const int nonfinite_rank = numbers.nonfinite_stage >= 0 ? order_.rank_of(numbers.nonfinite_stage) : -1;
  j.verdict = nonfinite_->judge(numbers, step, nonfinite_rank, has_math_);
  j.norm = std::sqrt(numbers.grad_sq_norm);
  j.clipped = j.verdict == NonfiniteGuard::Verdict::Update && model::clipping_applies(plan_.optim, j.norm);
  return j;
}

// Computation migration on this rank over the run: each step's figures, summed.
void Training::count_migration(const StepOutcome& so) {
  outcome_.migration_control_ns += so.migration_control_ns;
  outcome_.slices_given += so.slices_given;
  outcome_.migration_decisions += so.migration_decisions;
  outcome_.migration_statuses += so.migration_statuses;
  outcome_.migration_declined += so.migration_declined;
}

Training::After Training::step_synchronously(int step) {
  maybe_inject_failure(rank_, step);
  StepOutcome so = run_step(step);
  count_migration(so);
  const StepNumbers numbers = reducer_->reduce(step, asks_to_stop(), *watchdog_);
  if (numbers.stop) check_deferred_errors();  // before the update: a step read from a truncated file is not taken
  const Judgement j = judge(numbers, step);
  if (j.verdict == NonfiniteGuard::Verdict::Update) compute_->optimizer_step(j.norm, step);
  if (model::StageModel* m = compute_->model(); m && injected_at("CONDUCTOR_INJECT_NAN_WEIGHTS", rank_, step)) {
    const int vs = m->virtual_stages_held().front();  // an update gone wrong: one weight NaN
    std::vector<float> params = m->read(vs, model::Buffer::Params);
    params.front() = std::numeric_limits<float>::quiet_NaN();
    m->write(vs, model::Buffer::Params, params);
  }
  // Each rank's peaks: activations in flight (M_F, the memory model's unit) and bytes of its backend's memory.
  const double mine[2] = {so.peak_memory, compute_->peak_memory_bytes()};
  std::vector<trace::OpEvent> all;
  std::vector<double> peaks(2 * static_cast<std::size_t>(size_));
  gather_step(step, std::move(so.events), mine, all, peaks);
  return conclude(step, numbers, j.verdict, std::move(all), peaks);
}

// Rank 0's record of a step: the trace, metrics.jsonl, the step line, and what the non-finite guard says.
void Training::record(int step, const StepNumbers& numbers, NonfiniteGuard::Verdict verdict,
                      const std::vector<trace::OpEvent>& all, const std::vector<double>& peaks, double loss,
                      double valid_loss) {
  StepFigures figures;
  figures.loss = loss;
  figures.valid_loss = valid_loss;
  if (has_math_) {
    figures.grad_norm = std::sqrt(numbers.grad_sq_norm);
    figures.learning_rate = model::learning_rate(plan_.optim, step);
  }
  for (int r = 0; r < size_; ++r) {
    figures.peak_activations.push_back(peaks[2 * static_cast<std::size_t>(r)]);
    figures.peak_memory_bytes.push_back(peaks[2 * static_cast<std::size_t>(r) + 1]);
  }
  report_->record_step(step, all, figures);
  if (verdict != NonfiniteGuard::Verdict::Update) {
    (verdict == NonfiniteGuard::Verdict::Skip ? log::warn : log::error)(nonfinite_->message());
  } else if (const std::string warning = nonfinite_->divergence(loss, step, plan_.optim.grad_clip); !warning.empty()) {
    log::warn(warning);
  }
}

// A step's numbers are in and its update final: validation, the record (rank 0), checkpoint, replanning, stop.
Training::After Training::conclude(int step, const StepNumbers& numbers, NonfiniteGuard::Verdict verdict,
                                   std::vector<trace::OpEvent> all, const std::vector<double>& peaks) {
  const double loss = has_math_ ? numbers.loss : std::numeric_limits<double>::quiet_NaN();
  double valid_loss = std::numeric_limits<double>::quiet_NaN();
  if (compute_->model() && verdict != NonfiniteGuard::Verdict::Stop && model::eval_due(plan_, step)) {
    valid_loss = pipeline_eval_loss(*compute_->model(), order_, rank_, comm_, plan_.eval.batches, *unbounded_);
    check_deferred_errors();  // its validation batches too
  }
  // Rank 0 records the step. A write it cannot make (a full disk, a file-size limit) is kept and ends every rank
  // with its message (exit 1) through the next step's reduction, as a failed data read does: no collective of its
  // own (one per step would hold back the next step's start under post-validation), no MPI_Abort mid-collective.
  if (report_ && record_error_.empty()) {
    try {
      record(step, numbers, verdict, all, peaks, loss, valid_loss);
    } catch (const Error& e) {
      record_error_ = e.what();
    }
  }
  outcome_.steps_done = step + 1 - first_step_;
  if (verdict == NonfiniteGuard::Verdict::Stop) {
    outcome_.nonfinite = true;  // the step is in the trace; the model is not updated and not checkpointed
    return After::Stop;
  }
  const bool last = step + 1 == plan_.run.steps;
  checkpoint_if_due(step, numbers.stop, last);
  if (!last && !numbers.stop && replanning_) replan(step, std::move(all));
  if (!numbers.stop) return After::Continue;
  outcome_.stop_signal = stop_requested() ? stop_signal_number() : SIGTERM;
  if (rank_ == 0) log::warn("stop requested (signal): stopped after step " + std::to_string(step + 1));
  return After::Stop;
}

// Optimizer post-validation (the Zero Bubble paper's; docs/post-validation.md). After its ops of step k a rank
// posts the step's reduction, keeps a copy of its weights, AdamW moments and gradients, steps optimistically
// (unclipped) and starts step k+1 at once; step k's check is polled between ops and waited for once step k+1's
// ops are done, before its own update. If the check says rollback (clipping applies, or the non-finite policy
// skips or stops), every rank learns it from the same reduction: it restores the copy, redoes step k's update
// exactly as the synchronous path does (clipped, or none), drops step k+1's attempt (its ops ran to the end, so
// every message of it has been received: nothing is left in flight) and runs step k+1 again. Every step's
// result is therefore bit-identical to the synchronous path's.
void Training::run_post_validated() {
  executor_->set_between_ops([this] {
    if (posted_ && posted_->known_ns < 0 && reducer_->test(posted_->pending)) posted_->known_ns = clock_->now_ns();
  });
  for (int step = first_step_; step < plan_.run.steps;) {
    maybe_inject_failure(rank_, step);
    StepOutcome so = run_step(step);
    count_migration(so);  // a dropped attempt's migration was paid for too
    if (posted_) {        // the previous step's check, overlapped with this step
      const std::int64_t known = posted_->known_ns;
      bool rolled_back = false;
      if (settle(rolled_back) == After::Stop) break;  // this step's attempt is dropped
      if (rolled_back) {
        const auto begun = std::count_if(so.events.begin(), so.events.end(), [&](const trace::OpEvent& e) {
          return trace::is_compute(e.kind) && (known < 0 || e.start_ns < known);
        });
        reruns_.emplace_back(step, static_cast<int>(begun));
        continue;  // the same step again, on the corrected weights
      }
    }
    post(step, std::move(so));
    if (!overlaps_next(step)) {
      bool rolled_back = false;
      if (settle(rolled_back) == After::Stop) break;
    }
    ++step;
  }
  executor_->set_between_ops({});
  drain_shipments();
}

// The next step may start before this one's check only where nothing between them needs every rank: not after
// the last step, nor before a validation, a checkpoint or the global tier's replanning.
bool Training::overlaps_next(int step) const {
  if (step + 1 >= plan_.run.steps || replanning_) return false;
  if (compute_->model() && model::eval_due(plan_, step)) return false;
  const int every = plan_.checkpoint.every;
  return !(compute_->model() && !plan_.checkpoint.path.empty() && every > 0 && (step + 1) % every == 0);
}

// Step `step`'s ops are done and final: its events leave for rank 0, its reduction is posted, its optimistic
// update taken.
void Training::post(int step, StepOutcome so) {
  posted_ = std::make_unique<Posted>();
  posted_->step = step;
  posted_->events = std::move(so.events);
  posted_->peaks[0] = so.peak_memory;
  posted_->peaks[1] = compute_->peak_memory_bytes();
  ship_events(step, *posted_);  // before the reduction: its completion then means every rank's events are sent
  reducer_->start(step, asks_to_stop(), posted_->pending);
  backup_bytes_ = compute_->keep_backup();
  compute_->optimizer_step_unclipped(step);
}

// Waits for the posted step's check and judges it; rolls back and redoes its update where the optimistic one
// does not stand (rolled_back), then concludes the step.
Training::After Training::settle(bool& rolled_back) {
  Posted& p = *posted_;
  const StepNumbers numbers = reducer_->finish(p.pending, *watchdog_);
  if (numbers.stop) check_deferred_errors();
  const Judgement j = judge(numbers, p.step);
  rolled_back = j.verdict != NonfiniteGuard::Verdict::Update || j.clipped;
  if (rolled_back) {
    ++outcome_.rollbacks;
    compute_->restore_backup();
    if (j.clipped) compute_->optimizer_step(j.norm, p.step);
    if (rank_ == 0) {
      log::info("step " + std::to_string(p.step + 1) + ": post-validation rolled back the optimistic update (" +
                (j.clipped ? "gradient norm above optim.grad_clip; redone clipped" : "non-finite; not redone") + ")");
    }
  }
  std::vector<trace::OpEvent> all;
  std::vector<double> peaks(2 * static_cast<std::size_t>(size_));
  collect_events(p, all, peaks);
  const int step = p.step;
  posted_.reset();
  return conclude(step, numbers, j.verdict, std::move(all), peaks);
}

// Tags of the events' messages: two per step, wrapping (a rank has at most a few steps in flight).
constexpr int kTagSteps = 1 << 12;
// Without post-validation: the step's head (event count, peaks) and events, past the tags above.
constexpr int kTagGather = 2 * kTagSteps;

// A synchronous step's events and peaks reach rank 0 point to point, as the reducer's numbers do: a collective
// gather could not tell which rank is silent (with 4 ranks, one stopped between the reduction and the gather was
// reported as "no message arrived" from nobody), a receive per rank names it. Every wait names the rank it waits
// for, so the ranks that fire agree on the silent one (Watchdog::reporter).
void Training::gather_step(int step, std::vector<trace::OpEvent> mine, const double (&my_peaks)[2],
                           std::vector<trace::OpEvent>& all, std::vector<double>& peaks) {
  const std::string of_step = " (step " + std::to_string(step + 1) + ")";  // as the step lines count, from 1
  const MPI_Comm comm = trace_comm_->get();
  if (rank_ != 0) {
    const double head[3] = {static_cast<double>(mine.size()), my_peaks[0], my_peaks[1]};
    std::vector<MPI_Request> r(2, MPI_REQUEST_NULL);
    MPI_Isend(head, 3, MPI_DOUBLE, 0, kTagGather, comm, &r[0]);
    MPI_Isend(mine.data(), static_cast<int>(mine.size() * sizeof(trace::OpEvent)), MPI_BYTE, 0, kTagGather + 1, comm,
              &r[1]);
    watchdog_->wait_all(
        r, [&](std::size_t) { return "rank 0 to take this rank's trace events" + of_step; },
        [](std::size_t) { return 0; });
    return;
  }
  receive_rows(step, kTagGather, std::move(mine), my_peaks, all, peaks);
}

// Rank 0: every other rank's head (event count, peaks) on `tag` and its events on tag + 1, after rank 0's own.
void Training::receive_rows(int step, int tag, std::vector<trace::OpEvent> mine, const double (&my_peaks)[2],
                            std::vector<trace::OpEvent>& all, std::vector<double>& peaks) {
  const auto what = [step](const char* part) {
    return [step, part](std::size_t r) {
      return std::string(part) + " of rank " + std::to_string(r) + " (step " + std::to_string(step + 1) + ")";
    };
  };
  const MPI_Comm comm = trace_comm_->get();
  const std::size_t p = static_cast<std::size_t>(size_);
  std::vector<std::array<double, 3>> heads(p);
  std::vector<MPI_Request> requests(p, MPI_REQUEST_NULL);
  for (int r = 1; r < size_; ++r) {
    MPI_Irecv(heads[static_cast<std::size_t>(r)].data(), 3, MPI_DOUBLE, r, tag, comm,
              &requests[static_cast<std::size_t>(r)]);
  }
  const auto rank_r = [](std::size_t r) { return static_cast<int>(r); };  // request r is rank r's
  watchdog_->wait_all(requests, what("the trace event count"), rank_r);
  std::vector<std::vector<trace::OpEvent>> rows(p);
  for (int r = 1; r < size_; ++r) {
    const std::size_t k = static_cast<std::size_t>(r);
    rows[k].resize(static_cast<std::size_t>(heads[k][0]));
    MPI_Irecv(rows[k].data(), static_cast<int>(rows[k].size() * sizeof(trace::OpEvent)), MPI_BYTE, r, tag + 1, comm,
              &requests[k]);
  }
  watchdog_->wait_all(requests, what("the trace events"), rank_r);
  all = std::move(mine);
  peaks[0] = my_peaks[0];
  peaks[1] = my_peaks[1];
  for (std::size_t k = 1; k < p; ++k) {
    all.insert(all.end(), rows[k].begin(), rows[k].end());
    peaks[2 * k] = heads[k][1];
    peaks[2 * k + 1] = heads[k][2];
  }
}

// With overlapping steps a gather at each step's end would hold every rank until the slowest has finished the
// step, which is what post-validation avoids: each rank sends its events and peaks to rank 0 instead, which
// receives them when it concludes the step (their check being in, every rank has sent them). The events move
// into the shipment: only rank 0 reads a posted step's events again (collect_events), whether the step's check
// stands or rolls back.
void Training::ship_events(int step, Posted& posted) {
  if (rank_ == 0) return;
  while (!shipments_.empty()) {  // the oldest first: sent in order
    int done = 0;
    MPI_Testall(2, shipments_.front().requests.data(), &done, MPI_STATUSES_IGNORE);
    if (!done) break;
    shipments_.pop_front();
  }
  Shipment& s = shipments_.emplace_back();
  s.events = std::move(posted.events);
  s.head[0] = static_cast<double>(s.events.size());
  s.head[1] = posted.peaks[0];
  s.head[2] = posted.peaks[1];
  s.requests.assign(2, MPI_REQUEST_NULL);
  const int tag = 2 * (step % kTagSteps);
  MPI_Isend(s.head, 3, MPI_DOUBLE, 0, tag, trace_comm_->get(), &s.requests[0]);
  MPI_Isend(s.events.data(), static_cast<int>(s.events.size() * sizeof(trace::OpEvent)), MPI_BYTE, 0, tag + 1,
            trace_comm_->get(), &s.requests[1]);
}

void Training::collect_events(const Posted& posted, std::vector<trace::OpEvent>& all, std::vector<double>& peaks) {
  if (rank_ != 0) return;
  receive_rows(posted.step, 2 * (posted.step % kTagSteps), posted.events, posted.peaks, all, peaks);
}

void Training::drain_shipments() {
  for (Shipment& s : shipments_) {
    watchdog_->wait_all(
        s.requests, [](std::size_t) { return std::string("rank 0 to take this rank's trace events"); },
        [](std::size_t) { return 0; });
  }
  shipments_.clear();
}

// Rank 0 names each step that was rerun: where the check of the step before it said rollback while it ran.
// The count is the most ops of its dropped attempt that any rank had begun before that check was in.
void Training::report_reruns() {
  for (const auto& [step, begun] : reruns_) {
    const int mine[2] = {begun, rank_};
    int most[2] = {0, 0};
    MPI_Reduce(mine, most, 1, MPI_2INT, MPI_MAXLOC, 0, comm_);
    if (rank_ == 0) {
      log::info("step " + std::to_string(step + 1) + ": rerun after the rollback of step " + std::to_string(step) +
                "; its dropped attempt had begun " + std::to_string(most[0]) + " ops on rank " +
                std::to_string(most[1]) + " before that check was in");
    }
  }
  outcome_.reruns = static_cast<int>(reruns_.size());
}

// The price of post-validation: one more copy of weights, both AdamW moments and the gradients (rank 0 names the
// largest).
void Training::report_backup_size() {
  const double mine = static_cast<double>(backup_bytes_);
  double largest = 0;
  MPI_Reduce(&mine, &largest, 1, MPI_DOUBLE, MPI_MAX, 0, comm_);
  if (rank_ != 0 || largest <= 0) return;
  char buf[160];
  std::snprintf(buf, sizeof buf,
                "post-validation: a copy of weights, AdamW moments and gradients for rollback, %.3f MiB on the largest "
                "rank",
                largest / (1024.0 * 1024.0));
  log::info(buf);
}

void Training::checkpoint_if_due(int step, bool stopping, bool last) {
  if (!compute_->model() || plan_.checkpoint.path.empty()) return;
  const int every = plan_.checkpoint.every;
  if (!(last || stopping || (every > 0 && (step + 1) % every == 0))) return;
  const std::string what = "every rank's check of its state before checkpoint step " + std::to_string(step + 1);
  collectively(comm_, kExitFailure, *unbounded_, what, [&] {
    // Never a checkpoint of non-finite state (NaN weights pass the loss check for one step: the update that made
    // them ran after it).
    if (std::string where; !state_is_finite(*compute_, where))
      throw Error("step " + std::to_string(step + 1) + ": non-finite " + where +
                  " after the update; stopping without writing the checkpoint");
  });
  save_checkpoint_step(plan_, *compute_->model(), step + 1, nonfinite_->skipped(), comm_, *unbounded_);
}

// A stop signal, or a data read of this rank's that failed during the step (model/data.hpp): either asks every
// rank to stop, through the step's reduction (no collective of its own).
bool Training::asks_to_stop() const {
  return stop_requested() || !record_error_.empty() ||
         (compute_->model() && !compute_->model()->data().read_error().empty());
}

// Collective: errors a rank keeps until every rank can hear them. A failed data read (a file truncated or
// rewritten while the run reads it) or rank 0's failed record of a step (conclude): every rank ends with that
// rank's message (exit 1) before the step is recorded, taken or checkpointed; the steps before it are in the
// trace and the metrics, and the last checkpoint is untouched.
void Training::check_deferred_errors() {
  collectively(comm_, kExitFailure, [&] {
    if (!record_error_.empty()) throw Error(record_error_);  // rank 0's record of a step (conclude)
    if (!compute_->model()) return;
    if (const std::string error = compute_->model()->data().read_error(); !error.empty()) throw Error(error);
  });
}

// The global tier (rank 0) plans while the ranks train: the order computed from step k's timings is ready by the
// end of step k+1 and runs at step k+2, so the policy's latency never stalls the pipeline.
void Training::replan(int step, std::vector<trace::OpEvent> all) {
  collectively(comm_, kExitFailure, [&] {
    if (rank_ != 0) return;
    std::optional<sched::Schedule> next = ahead_->after_step(step, order_, std::move(all));  // planner errors too
    if (!next) return;
    sched::validate_or_throw(*next, memory_limit_, plan_.costs.memory_after_b, "the global scheduler's order");
    order0_ = std::move(*next);
  });
  order_ = broadcast_order(rank_ == 0 ? &order0_ : nullptr, rank_, comm_);
}

void Training::finish() {
  if (!report_) return;
  outcome_.losses = report_->losses();
  outcome_.valid_losses = report_->valid_losses();
  PlannerFigures figures;
  if (ahead_) {
    ahead_->finish();  // stopped early: let the planner finish before reading its figures
    figures = {ahead_->orders_from_planner(), ahead_->latency_ms(), ahead_->waited_ms(), planner_->policy_source()};
  }
  report_->finish(order_, memory_limit_, outcome_.steps_done, figures);
}

}  // namespace

RunOutcome train(const plan::Plan& plan, MPI_Comm comm, const sched::PlannerFactory& make_planner) {
  Training training(plan, comm, make_planner);
  return training.run();
}

}  // namespace conductor::runtime
