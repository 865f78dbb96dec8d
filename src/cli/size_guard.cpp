#include "conductor/cli/size_guard.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "conductor/config/resolve.hpp"
#include "conductor/model/layer_split.hpp"
#include "conductor/runtime/memory_estimate.hpp"
#include "conductor/sched/generators.hpp"
#include "conductor/sched/schedule.hpp"
#include "conductor/sim/memory_estimate.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "conductor/util/mpi.hpp"

namespace conductor::cli {

namespace {

std::string gb(std::uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GB", static_cast<double>(bytes) / 1e9);
  return buf;
}

int ops_per_microbatch(const std::string& kind) {
  // Zero-bubble schedules split the backward pass into B and W; the others run one BW op. A schedule file may
  // hold either: counted as three.
  return kind.rfind("zb", 0) == 0 || kind.rfind("file:", 0) == 0 ? 3 : 2;
}

// The simulation's shape (no events): what both simulate guards count.
sim::SimSize sim_size(const config::Deck& deck) {
  sim::SimSize size;
  size.p = deck.parallel.pipeline;
  size.m = deck.parallel.microbatches;
  size.v = deck.parallel.virtual_chunks;
  size.ops_per_microbatch = ops_per_microbatch(deck.schedule.kind);
  return size;
}

// The trainer of `rank` under the deck: its virtual stages' layers (the schedule's placement) and the peak
// microbatches in flight (the schedule's memory limit, at most m).
// The deck's layers per virtual stage (resolved once for every rank's shape).
std::vector<int> stage_layers(const config::Deck& deck) {
  const int stages = deck.parallel.pipeline * std::max(1, deck.parallel.virtual_chunks);
  return model::split_layers(config::resolve(deck).model, stages);
}

runtime::RankModelShape rank_shape(const config::Deck& deck, int rank, const std::vector<int>& split) {
  sched::Schedule layout;  // placement only: which virtual stages the rank holds
  layout.p = deck.parallel.pipeline;
  layout.m = deck.parallel.microbatches;
  layout.v = deck.parallel.virtual_chunks;
  layout.placement = plan::v_shaped_kind(deck.schedule.kind) || deck.schedule.placement == "v" ? sched::Placement::V
                                                                                               : sched::Placement::Loop;
  runtime::RankModelShape s;
  s.vocab = deck.model.vocab;
  s.seq_len = deck.model.seq_len;
  s.d_model = deck.model.d_model;
  s.n_heads = deck.model.n_heads;
  s.mlp_hidden = deck.model.mlp_ratio * deck.model.d_model;
  s.microbatch_size = deck.parallel.microbatch_size;
  s.post_validation = deck.schedule.post_validation;
  for (int c = 0; c < layout.v; ++c) {
    const int stage = layout.stage_of(rank, c);
    s.layers.push_back(split[static_cast<std::size_t>(stage)]);
    s.embedding = s.embedding || stage == 0;
    s.head = s.head || stage == layout.num_stages() - 1;
    // Each microbatch's F takes its input from the stage before, its B from the stage after: posted as receives
    // where that stage is on another rank.
    const bool from_before = stage > 0 && layout.rank_of(stage - 1) != rank;
    const bool from_after = stage < layout.num_stages() - 1 && layout.rank_of(stage + 1) != rank;
    s.posted_inputs += static_cast<double>(layout.m) * ((from_before ? 1 : 0) + (from_after ? 1 : 0));
  }
  double limit = deck.schedule.memory_limit;
  if (limit <= 0 && deck.schedule.kind.rfind("file:", 0) != 0)
    limit = sched::default_memory_limit(deck.schedule.kind, layout.p, layout.m, layout.v);
  s.in_flight = limit > 0 ? std::min<double>(limit, layout.m) : layout.m;
  return s;
}

}  // namespace

std::uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "MemAvailable: %llu kB", &kb) == 1) return kb * 1024ULL;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page) : 0;
}

namespace {

// A number in a one-line file (a cgroup's memory.max), or nothing ("max", unreadable).
std::optional<std::uint64_t> number_in(const std::string& path) {
  std::ifstream in(path);
  unsigned long long v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

}  // namespace

std::uint64_t cgroup_memory_left(const std::string& self_cgroup, const std::string& root) {
  std::ifstream in(self_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    // ",memory,cpu," to look "memory" up as a whole name (built in place: GCC 12 misreads a + chain here).
    std::string controllers(1, ',');
    controllers.append(line, a + 1, b - a - 1).push_back(',');
    const std::string path = line.substr(b + 1);
    std::string limit, usage;
    if (controllers == ",,") {
      limit = root + path + "/memory.max", usage = root + path + "/memory.current";
    } else if (controllers.find(",memory,") != std::string::npos) {
      limit = root + "/memory" + path + "/memory.limit_in_bytes";
      usage = root + "/memory" + path + "/memory.usage_in_bytes";
    } else {
      continue;
    }
    const std::optional<std::uint64_t> max = number_in(limit);
    if (!max || *max >= (std::uint64_t{1} << 60)) continue;  // "max", or v1's unlimited (near 2^63)
    const std::uint64_t used = number_in(usage).value_or(0);
    return *max > used ? *max - used : 1;
  }
  return 0;
}

std::uint64_t address_space_left() {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  std::ifstream statm("/proc/self/statm");
  unsigned long long pages = 0;
  statm >> pages;
  const std::uint64_t used = pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return limit.rlim_cur > used ? limit.rlim_cur - used : 1;
}

std::uint64_t memory_limit_bytes(const config::Deck& deck, std::string& source) {
  if (deck.run.memory_limit_gb > 0) {
    source = "run.memory_limit_gb";
    return static_cast<std::uint64_t>(deck.run.memory_limit_gb * 1e9);
  }
  const std::uint64_t available = available_memory_bytes(), cgroup = cgroup_memory_left();
  if (cgroup > 0 && (available == 0 || cgroup < available)) {
    source =
        "what this job's memory cgroup has left (its memory.max: Slurm's --mem, a container's limit; "
        "run.memory_limit_gb sets another)";
    return cgroup;
  }
  source = "the memory available on this machine (MemAvailable; run.memory_limit_gb sets another)";
  return available;
}

void check_simulate_size(const config::Deck& deck, std::uint64_t events_up_to) {
  sim::SimSize size = sim_size(deck);
  size.events = deck.trace.enabled || sim::ops_per_step(size) <= events_up_to;
  size.comm_events = deck.trace.enabled && deck.trace.comm_events;
  const std::uint64_t estimate = sim::estimate_bytes(size);
  std::string source;
  std::uint64_t limit = memory_limit_bytes(deck, source);
  if (const std::uint64_t left = address_space_left(); left > 0 && (limit == 0 || left < limit)) {
    limit = left;
    source = "this process's address-space limit (ulimit -v), less what it maps already";
  }
  if (limit == 0 || estimate <= limit) return;
  throw InputError(
      "the simulation needs about " + gb(estimate) + " of memory (" + std::to_string(sim::ops_per_step(size)) +
      " ops per step: parallel.pipeline " + std::to_string(size.p) + " x microbatches " + std::to_string(size.m) +
      " x virtual " + std::to_string(size.v) + " x " + std::to_string(size.ops_per_microbatch) +
      (size.events ? ", with trace events" : "") + "), above the limit of " + gb(limit) + " set by " + source +
      "; make the pipeline or the microbatch count smaller" + (size.events ? ", or set trace.enabled=false" : ""));
}

void check_trace_space(const config::Deck& deck) {
  if (!deck.trace.enabled) return;
  const sim::SimSize size = sim_size(deck);
  const double floor_bytes = static_cast<double>(sim::ops_per_step(size)) * static_cast<double>(deck.run.steps) *
                             static_cast<double>(kTraceFloorBytesPerEvent);
  // The file system run.output will be on: its nearest folder that exists.
  std::error_code ec;
  std::filesystem::path at = std::filesystem::absolute(deck.run.output, ec);
  while (!at.empty() && !std::filesystem::exists(at, ec) && at != at.parent_path()) at = at.parent_path();
  const std::filesystem::space_info space = std::filesystem::space(at, ec);
  if (ec || space.available == static_cast<std::uintmax_t>(-1)) return;
  const double free_bytes = static_cast<double>(space.available);
  if (floor_bytes <= free_bytes) {
    const double typical = floor_bytes / kTraceFloorBytesPerEvent * kTraceTypicalBytesPerEvent;
    if (typical > free_bytes) {
      log::warn("the trace may take up to " + gb(static_cast<std::uint64_t>(typical)) + " (run.steps " +
                std::to_string(deck.run.steps) + " x " + std::to_string(sim::ops_per_step(size)) + " op events x " +
                std::to_string(kTraceTypicalBytesPerEvent) +
                " bytes, what small noisy steps take with their transfers), more than the " + gb(space.available) +
                " free on the file system of '" + at.string() +
                "': it may fill it before the run ends (fewer steps, another run.output, or trace.enabled=false)");
    }
    return;
  }
  throw InputError("the trace would take at least " + gb(static_cast<std::uint64_t>(floor_bytes)) + " (run.steps " +
                   std::to_string(deck.run.steps) + " x " + std::to_string(sim::ops_per_step(size)) +
                   " op events per step x " + std::to_string(kTraceFloorBytesPerEvent) +
                   " bytes, compressed), more than the " + gb(space.available) + " free on the file system of '" +
                   at.string() + "' (run.output = '" + deck.run.output +
                   "'); run fewer steps, choose another run.output, or set trace.enabled=false");
}

void check_run_size(const config::Deck& deck) {
  const int rank = mpi::world_rank();
  std::string problem;
  std::uint64_t mine = 0;
  runtime::RankMemory memory;
  if (deck.backend == "cpu") {  // host memory; cuda's lives on the GPU, emulated allocates no model
    try {
      memory = runtime::estimate_rank_memory(rank_shape(deck, rank, stage_layers(deck)));
      mine = memory.total();
    } catch (const InputError&) {
      // a layer split that does not fit is reported, with its key, when the model is built
    }
  }
  unsigned long long node_total = mine;
  int node_ranks = 1;
  if (mpi::initialized()) {
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    unsigned long long m = mine;
    MPI_Allreduce(&m, &node_total, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, node);
    MPI_Comm_size(node, &node_ranks);
    MPI_Comm_free(&node);
  }
  std::string source;
  const std::uint64_t limit = memory_limit_bytes(deck, source);
  // A rank's own address-space limit (ulimit -v) bounds what it alone allocates.
  const std::uint64_t own = address_space_left();
  if (own > 0 && mine > own) {
    problem = "rank " + std::to_string(rank) + " needs about " + gb(mine) + " of memory (" + gb(memory.state_bytes) +
              " for its weights with their gradients and AdamW state, " + gb(memory.activation_bytes) +
              " of activations, " + gb(memory.receive_bytes) + " for the receives a step posts), above its " +
              "address-space limit (ulimit -v) of " + gb(own) + " beyond what it maps already; raise the limit, or " +
              "use a smaller model or fewer or smaller microbatches";
  } else if (limit > 0 && node_total > limit) {
    problem = "the run needs about " + gb(node_total) + " of memory on this node (" + std::to_string(node_ranks) +
              " rank" + (node_ranks == 1 ? "" : "s") + "; rank " + std::to_string(rank) + ": " +
              gb(memory.state_bytes) + " for " + std::to_string(memory.parameters) +
              " parameters with their gradients and AdamW state" +
              (deck.schedule.post_validation ? " and its post-validation copy, " : ", ") + gb(memory.activation_bytes) +
              " of activations, " + gb(memory.receive_bytes) + " for the receives a step posts), above the limit of " +
              gb(limit) + " set by " + source +
              "; use a smaller model, fewer or smaller microbatches (in flight, or per step), or more nodes";
  }
  mpi::check_all(problem.empty(), problem, kExitUsage);
}

void check_rank_sizes_against_deck_limit(const config::Deck& deck) {
  if (deck.backend != "cpu" || deck.run.memory_limit_gb <= 0) return;
  std::vector<int> split;
  try {
    split = stage_layers(deck);
  } catch (const InputError&) {
    return;  // a layer split that does not fit is reported, with its key, where the model is built
  }
  const std::uint64_t limit = static_cast<std::uint64_t>(deck.run.memory_limit_gb * 1e9);
  int largest = 0;
  runtime::RankMemory most;
  for (int r = 0; r < deck.parallel.pipeline; ++r) {
    const runtime::RankMemory m = runtime::estimate_rank_memory(rank_shape(deck, r, split));
    if (m.total() > most.total()) largest = r, most = m;
  }
  if (most.total() <= limit) return;
  throw InputError("rank " + std::to_string(largest) + " alone needs about " + gb(most.total()) + " of memory (" +
                   gb(most.state_bytes) + " for " + std::to_string(most.parameters) +
                   " parameters with their gradients and AdamW state" +
                   (deck.schedule.post_validation ? " and its post-validation copy, " : ", ") +
                   gb(most.activation_bytes) + " of activations, " + gb(most.receive_bytes) +
                   " for the receives a step posts), above run.memory_limit_gb = " + gb(limit) +
                   " for a node; use a smaller model, fewer or smaller microbatches in flight, or a " +
                   "larger run.memory_limit_gb");
}

}  // namespace conductor::cli
