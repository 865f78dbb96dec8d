// Cost of the trace: recording an op (two clock reads + a push into the step's event buffer, what the
// runtime does around every op) and writing a step to trace.h5 (append_events + append_step + flush, done
// by rank 0 at the end of every step). Reports ns per event, events per second, and the overhead as a
// percentage of a step in which every rank runs N ops of 1 ms each (the runtime budget is 2%).
//
//   build-trace/bench/bench_trace [steps=50] [dir=$TMPDIR or /tmp]
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_main.hpp"
#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_writer.hpp"

using namespace conductor::trace;
using Clock = std::chrono::steady_clock;

namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// One step's events as the runtime records them: per rank, ops_per_rank compute ops (F/B/W cycling),
// each with a SEND and a RECV (what a pipeline stage does for every forward and backward).
std::vector<OpEvent> make_step(int step, int ranks, int ops_per_rank) {
  std::vector<OpEvent> out;
  out.reserve(static_cast<size_t>(ranks) * ops_per_rank * 3);
  const EventKind compute[] = {EventKind::F, EventKind::B, EventKind::W};
  for (int r = 0; r < ranks; ++r) {
    std::int64_t t = 1'000'000'000LL * step + 1'000'000LL * r;
    for (int i = 0; i < ops_per_rank; ++i) {
      for (EventKind k : {compute[i % 3], EventKind::SEND, EventKind::RECV}) {
        OpEvent e;
        e.step = step;
        e.rank = r;
        e.stage = r;
        e.microbatch = i / 3;
        e.kind = k;
        e.ready_ns = t - 1000;
        e.start_ns = t;
        e.end_ns = t + (is_compute(k) ? 1'000'000 : 20'000) + (i * 7919) % 5000;  // jitter: realistic entropy
        e.bytes = is_compute(k) ? 0 : 4LL << 20;
        e.wait_ns = (i * 104729) % 3000;
        e.peer = is_compute(k) ? -1 : (r + 1) % ranks;
        t = e.end_ns + 50;
        out.push_back(e);
      }
    }
  }
  return out;
}

// CPU time of this thread: the cost on a dedicated core, independent of how loaded the machine is.
double cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

}  // namespace

static int run(int argc, char** argv) {
  // steps: a positive integer (atoi of "--help" was 0 steps, and the step loop's figures divided by it: SIGSEGV).
  if (argc > 3)
    throw conductor::bench::BadArgument("two arguments at most (STEPS, DIR), got " + std::to_string(argc - 1));
  const int steps = argc > 1 ? conductor::bench::int_argument("STEPS", argv[1], 1, 1000000) : 50;
  std::filesystem::path dir = argc > 2 ? argv[2] : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
  std::string path = (dir / ("bench_trace_" + std::to_string(getpid()) + ".h5")).string();

  // 1. Recording: what the runtime does around each op.
  {
    const int n = 2'000'000;
    std::vector<OpEvent> buf;
    buf.reserve(4096);
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) {
      if (buf.size() == 4096) buf.clear();  // a step's buffer is reused
      OpEvent e;
      e.step = 1;
      e.rank = 0;
      e.microbatch = i;
      e.ready_ns = now_ns();
      e.start_ns = now_ns();
      e.end_ns = e.start_ns;
      buf.push_back(e);
    }
    double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n;
    std::printf("record: %.1f ns per event (2 clock reads + buffer push)\n", ns);
  }

  // 2. Writing, for several pipeline sizes; N ops of 1 ms per rank per step.
  std::printf("\n%5s %5s %7s %9s %9s %9s %11s %8s %9s %9s\n", "ranks", "N", "events", "wall ms", "cpu ms", "ns/event",
              "events/s", "step ms", "wall %", "cpu %");
  struct Case {
    int ranks, ops;
  };
  for (Case c : {Case{4, 24}, Case{4, 72}, Case{8, 72}, Case{16, 144}, Case{64, 144}}) {
    RunInfo info;
    info.world_size = c.ranks;
    // The pipeline's shape, as run and simulate record it: the writer sizes /events' chunk to a step's compute
    // ops (3 p m v; here ops per rank = 3 m).
    info.pipeline = c.ranks;
    info.microbatches = std::max(1, c.ops / 3);
    info.backend = "bench";
    info.source = "bench";
    std::vector<double> per_step, per_step_cpu;
    size_t events_per_step = 0;
    {
      TraceWriter w(path, info);
      for (int s = 0; s < steps; ++s) {
        auto ev = make_step(s, c.ranks, c.ops);
        events_per_step = ev.size();
        auto t0 = Clock::now();
        double c0 = cpu_ms();
        StepRecord rec = summarize_step(ev, c.ranks, s, 64.0);
        w.append_events(ev);
        w.append_step(rec);
        w.flush();
        per_step_cpu.push_back(cpu_ms() - c0);
        per_step.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      w.close();
    }
    std::sort(per_step.begin(), per_step.end());
    std::sort(per_step_cpu.begin(), per_step_cpu.end());
    double median_ms = per_step[per_step.size() / 2];
    double median_cpu = per_step_cpu[per_step_cpu.size() / 2];
    double ns_event = median_cpu * 1e6 / static_cast<double>(events_per_step);
    double step_ms = c.ops * 1.0;  // each rank runs N ops of 1 ms
    std::printf("%5d %5d %7zu %9.3f %9.3f %9.1f %11.3g %8.1f %9.3f %9.3f\n", c.ranks, c.ops, events_per_step, median_ms,
                median_cpu, ns_event, 1e9 / ns_event, step_ms, 100.0 * median_ms / step_ms,
                100.0 * median_cpu / step_ms);
    std::printf("      file: %.1f bytes per event on disk\n",
                static_cast<double>(std::filesystem::file_size(path)) / (static_cast<double>(events_per_step) * steps));
    std::filesystem::remove(path);
  }
  std::printf(
      "\nper step on the writing rank: summarize_step + append_events + append_step + flush (median;\n"
      "wall and this thread's CPU time); ns/event and events/s from CPU time; %% = of a step whose\n"
      "ranks each run N ops of 1 ms. Recording adds N x the record cost per rank (~0.01%% at 1 ms).\n");
  return 0;
}

int main(int argc, char** argv) {
  return conductor::bench::guarded_main(
      "bench_trace", run, argc, argv,
      "usage: bench_trace [STEPS (1 .. 1000000, default 50)] [DIR (default $TMPDIR or /tmp)]\n");
}
