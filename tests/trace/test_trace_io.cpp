// TraceWriter / read_trace: round trip C++ -> C++ and C++ -> h5py, enum values, attributes, errors,
// and the durability guarantee (a child process SIGKILLed while writing leaves every flushed step).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>

#include "conductor/trace/summary.hpp"
#include "conductor/trace/trace_reader.hpp"
#include "conductor/trace/trace_writer.hpp"
#include "conductor/util/error.hpp"
#include "scratch_dir.hpp"

using namespace conductor;
using namespace conductor::trace;
namespace fs = std::filesystem;

namespace {

RunInfo sample_info() {
  RunInfo info;
  info.deck = "model:\n  layers: 4\nname: \"quoted ü\"\n";
  info.world_size = 4;
  info.schedule = "zb-h1";
  info.execution = "readiness";
  info.hint = "schedule";
  info.backend = "emulated";
  info.source = "runtime";
  info.hostnames = {"node-a", "node-a", "node-b", "node-b"};
  info.git_revision = "0123456789ab";
  info.pipeline = 4;
  info.microbatches = 8;
  info.virtual_chunks = 2;
  return info;
}

// A deterministic step: every rank runs F, B, W for each microbatch plus a SEND and RECV per op, with
// values derived from (step, index) so a reader can check every field of every row.
std::vector<OpEvent> step_events(int step, int ranks, int microbatches) {
  std::vector<OpEvent> out;
  const EventKind kinds[] = {EventKind::F, EventKind::B, EventKind::W, EventKind::SEND, EventKind::RECV, EventKind::BW};
  int i = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int mb = 0; mb < microbatches; ++mb) {
      for (EventKind k : kinds) {
        OpEvent e;
        e.step = step;
        e.rank = r;
        e.stage = r + ranks;
        e.chunk = 1;
        e.microbatch = mb;
        e.kind = k;
        e.ready_ns = 1'000'000'000LL * step + 1000LL * i;
        e.start_ns = e.ready_ns + 7;
        e.end_ns = e.start_ns + 500 + (i % 13);
        e.bytes = 4096LL * (i + 1);
        e.wait_ns = i % 5;
        e.peer = is_compute(k) ? -1 : (r + 1) % ranks;
        e.migrated = static_cast<std::int16_t>(i % 7 == 0 ? 4096 : 0);
        out.push_back(e);
        ++i;
      }
    }
  }
  return out;
}

void expect_same(const OpEvent& a, const OpEvent& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.stage, b.stage);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.microbatch, b.microbatch);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.ready_ns, b.ready_ns);
  EXPECT_EQ(a.start_ns, b.start_ns);
  EXPECT_EQ(a.end_ns, b.end_ns);
  EXPECT_EQ(a.bytes, b.bytes);
  EXPECT_EQ(a.wait_ns, b.wait_ns);
  EXPECT_EQ(a.peer, b.peer);
  EXPECT_EQ(a.migrated, b.migrated);
}

StepRecord step_record(const std::vector<OpEvent>& ev, int step, int ranks) {
  StepRecord s = summarize_step(ev, ranks, step, 32.0);
  s.loss = 10.0 - step * 0.5;
  return s;
}

std::string run_capture(const std::string& cmd, int& status) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    status = -1;
    return out;
  }
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  status = pclose(p);
  return out;
}

bool have_h5py() {
  int status = 0;
  run_capture(std::string(CONDUCTOR_PYTHON) + " -c 'import h5py' 2>/dev/null", status);
  return status == 0;
}

}  // namespace

TEST(TraceIO, RoundTripCpp) {
  const test_support::ScratchDir dir("conductor_trace");
  std::string path = (dir / "trace.h5").string();
  RunInfo info = sample_info();
  info.deck += std::string(200000, 'x');  // a deck larger than an object header's 64 KB attribute limit
  std::vector<OpEvent> all;
  std::vector<StepRecord> steps;
  {
    TraceWriter w(path, info);
    for (int s = 0; s < 3; ++s) {
      auto ev = step_events(s, 4, 100);  // 2400 events per step: spans several 1024-row chunks
      // Append in two pieces to exercise multiple appends per step.
      std::vector<OpEvent> first(ev.begin(), ev.begin() + 1000), second(ev.begin() + 1000, ev.end());
      w.append_events(first);
      w.append_events(second);
      steps.push_back(step_record(ev, s, 4));
      w.append_step(steps.back());
      w.flush();
      all.insert(all.end(), ev.begin(), ev.end());
      EXPECT_EQ(w.events_written(), static_cast<std::int64_t>(all.size()));
      EXPECT_EQ(w.steps_written(), s + 1);
    }
    TraceWriter moved = std::move(w);  // the moved-to writer owns the file and closes it
    EXPECT_THROW(w.flush(), Error);
  }
  Trace t = read_trace(path);
  EXPECT_EQ(t.schema_version, kSchemaVersion);
  EXPECT_EQ(t.info.deck, info.deck);
  EXPECT_EQ(t.info.world_size, 4);
  EXPECT_EQ(t.info.schedule, "zb-h1");
  EXPECT_EQ(t.info.execution, "readiness");
  EXPECT_EQ(t.info.hint, "schedule");
  EXPECT_EQ(t.info.backend, "emulated");
  EXPECT_EQ(t.info.source, "runtime");
  EXPECT_EQ(t.info.hostnames, info.hostnames);
  EXPECT_EQ(t.info.git_revision, "0123456789ab");
  EXPECT_EQ(t.info.pipeline, 4);
  EXPECT_EQ(t.info.microbatches, 8);
  EXPECT_EQ(t.info.virtual_chunks, 2);
  ASSERT_EQ(t.events.size(), all.size());
  for (size_t i = 0; i < all.size(); ++i) expect_same(t.events[i], all[i]);
  // migration.slices' largest, 4096, as written (8 bits wrapped it to 0: a help read as none).
  EXPECT_EQ(t.events[0].migrated, 4096);
  ASSERT_EQ(t.steps.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(t.steps[i].step, steps[i].step);
    EXPECT_EQ(t.steps[i].loss, steps[i].loss);
    EXPECT_EQ(t.steps[i].start_ns, steps[i].start_ns);
    EXPECT_EQ(t.steps[i].makespan_ns, steps[i].makespan_ns);
    EXPECT_EQ(t.steps[i].bubble_ratio, steps[i].bubble_ratio);
    EXPECT_EQ(t.steps[i].stage_bubble_ratio, steps[i].stage_bubble_ratio);
    EXPECT_EQ(t.steps[i].samples_per_s, steps[i].samples_per_s);
    EXPECT_EQ(t.steps[i].lower_bound_ns, steps[i].lower_bound_ns);
  }
}

TEST(TraceIO, FileLayoutEnumAndFilters) {
  const test_support::ScratchDir dir("conductor_trace");
  std::string path = (dir / "trace.h5").string();
  {
    TraceWriter w(path, sample_info());
    w.append_events(step_events(0, 2, 2));
    w.append_step(step_record(step_events(0, 2, 2), 0, 2));
  }
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  hid_t d = H5Dopen2(f, "events", H5P_DEFAULT);
  ASSERT_GE(d, 0);
  hid_t type = H5Dget_type(d);
  int idx = H5Tget_member_index(type, "kind");
  ASSERT_GE(idx, 0);
  hid_t kind = H5Tget_member_type(type, static_cast<unsigned>(idx));
  EXPECT_EQ(H5Tget_class(kind), H5T_ENUM);
  EXPECT_EQ(H5Tget_nmembers(kind), 11);
  const char* names[] = {"F", "B", "W", "BW", "SEND", "RECV", "ANNOUNCE", "HELP_F", "HELP_B", "HELP_W", "HELP_BW"};
  for (int v = 0; v < 11; ++v) {
    std::int8_t value = static_cast<std::int8_t>(v);
    char name[16] = {};
    ASSERT_GE(H5Tenum_nameof(kind, &value, name, sizeof name), 0);
    EXPECT_STREQ(name, names[v]);
  }
  // Chunked, extendible, shuffle + gzip.
  hid_t dcpl = H5Dget_create_plist(d);
  EXPECT_EQ(H5Pget_layout(dcpl), H5D_CHUNKED);
  int nfilters = H5Pget_nfilters(dcpl);
  std::vector<H5Z_filter_t> filters;
  for (int i = 0; i < nfilters; ++i) {
    unsigned flags = 0;
    size_t nelm = 0;
    unsigned cd[8];
    filters.push_back(H5Pget_filter2(dcpl, static_cast<unsigned>(i), &flags, &nelm, cd, 0, nullptr, nullptr));
  }
  EXPECT_EQ(filters, (std::vector<H5Z_filter_t>{H5Z_FILTER_SHUFFLE, H5Z_FILTER_DEFLATE}));
  hid_t space = H5Dget_space(d);
  hsize_t dims = 0, maxdims = 0;
  H5Sget_simple_extent_dims(space, &dims, &maxdims);
  EXPECT_EQ(dims, 24u);
  EXPECT_EQ(maxdims, H5S_UNLIMITED);
  H5Sclose(space);
  H5Pclose(dcpl);
  H5Tclose(kind);
  H5Tclose(type);
  H5Dclose(d);
  H5Fclose(f);
}

// Every flush rewrites the partial last chunk, and SWMR keeps each replaced copy: the chunks are sized to a step
// (3 p m v compute ops, 64 .. 1024 rows; /steps 8 rows), so a run of small steps stays near its rows' size. With
// 1024-row event chunks and 128-row step chunks, 400 steps of 24 events (p 2, m 2) took ~90 bytes an event.
TEST(TraceIO, SmallStepsCostFewBytesPerEvent) {
  const test_support::ScratchDir dir("conductor_trace");
  const std::string path = (dir / "trace.h5").string();
  RunInfo info = sample_info();
  info.world_size = info.pipeline = 2;
  info.microbatches = 2;
  info.virtual_chunks = 1;
  std::int64_t events = 0;
  {
    TraceWriter w(path, info);
    for (int step = 0; step < 400; ++step) {
      const std::vector<OpEvent> ev = step_events(step, 2, 2);
      w.append_events(ev);
      w.append_step(step_record(ev, step, 2));
      w.flush();
      events += static_cast<std::int64_t>(ev.size());
    }
  }
  const double per_event = static_cast<double>(fs::file_size(path)) / static_cast<double>(events);
  EXPECT_LT(per_event, 40.0) << fs::file_size(path) << " bytes for " << events << " events";
}

TEST(TraceIO, RoundTripH5py) {
  if (!have_h5py()) GTEST_SKIP() << CONDUCTOR_PYTHON << " has no h5py";
  const test_support::ScratchDir dir("conductor_trace");
  std::string path = (dir / "trace.h5").string();
  auto ev = step_events(5, 3, 4);
  StepRecord rec = step_record(ev, 5, 3);
  {
    TraceWriter w(path, sample_info());
    w.append_events(ev);
    w.append_step(rec);
  }
  long long sum_end = 0;
  for (const auto& e : ev) sum_end += e.end_ns;
  std::string script = (dir / "check.py").string();
  std::ofstream(script) << R"(import sys, h5py
f = h5py.File(sys.argv[1], "r")
e, s = f["events"], f["steps"]
kinds = h5py.check_enum_dtype(e.dtype["kind"])
assert kinds == {"F": 0, "B": 1, "W": 2, "BW": 3, "SEND": 4, "RECV": 5, "ANNOUNCE": 6,
                 "HELP_F": 7, "HELP_B": 8, "HELP_W": 9, "HELP_BW": 10}, kinds
names = {v: k for k, v in kinds.items()}
print(len(e), int(e["end_ns"].sum()), "".join(names[int(k)][0] for k in e["kind"][:6]))
print(int(s["step"][0]), repr(float(s["loss"][0])), int(s["makespan_ns"][0]), repr(float(s["bubble_ratio"][0])))
a = f.attrs
print(int(a["schema_version"]), a["schedule"], a["execution"], a["backend"], int(a["world_size"]), ",".join(a["hostnames"]), int(a["virtual"]))
)";
  int status = 0;
  std::string out = run_capture(std::string(CONDUCTOR_PYTHON) + " " + script + " " + path + " 2>&1", status);
  ASSERT_EQ(status, 0) << out;
  char bubble[64], loss[64];
  std::snprintf(bubble, sizeof bubble, "%.17g", rec.bubble_ratio);
  std::snprintf(loss, sizeof loss, "%.17g", rec.loss);
  std::string expected = std::to_string(ev.size()) + " " + std::to_string(sum_end) + " FBWSRB\n";
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), expected) << out;
  // repr() of a Python float is the shortest round-trip form; compare numerically instead of textually.
  std::istringstream lines(out);
  std::string l1, l2, l3;
  std::getline(lines, l1);
  std::getline(lines, l2);
  std::getline(lines, l3);
  int step = 0;
  double pyloss = 0, pybubble = 0;
  long long makespan = 0;
  ASSERT_EQ(std::sscanf(l2.c_str(), "%d %lf %lld %lf", &step, &pyloss, &makespan, &pybubble), 4) << l2;
  EXPECT_EQ(step, 5);
  EXPECT_EQ(pyloss, rec.loss);
  EXPECT_EQ(makespan, rec.makespan_ns);
  EXPECT_EQ(pybubble, rec.bubble_ratio);
  EXPECT_EQ(l3, "1 zb-h1 readiness emulated 4 node-a,node-a,node-b,node-b 2");
}

TEST(TraceIO, CreateFailureNamesPathAndCall) {
  std::string path = "/nonexistent-dir-for-conductor/trace.h5";
  try {
    TraceWriter w(path, sample_info());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("H5Fcreate"), std::string::npos) << msg;
  }
}

TEST(TraceIO, ReadErrorsNameWhatIsMissing) {
  const test_support::ScratchDir dir("conductor_trace");
  std::string junk = (dir / "junk.h5").string();
  std::ofstream(junk) << "not an HDF5 file";
  try {
    read_trace(junk);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("H5Fopen"), std::string::npos) << e.what();
  }
  // A file with the attributes and /events but no /steps.
  std::string partial = (dir / "partial.h5").string();
  { TraceWriter w(partial, sample_info()); }
  hid_t f = H5Fopen(partial.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  ASSERT_GE(H5Ldelete(f, "steps", H5P_DEFAULT), 0);
  H5Fclose(f);
  try {
    read_trace(partial);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("missing dataset '/steps'"), std::string::npos) << e.what();
  }
}

TEST(TraceIO, AppendAfterCloseThrows) {
  const test_support::ScratchDir dir("conductor_trace");
  TraceWriter w((dir / "t.h5").string(), sample_info());
  w.close();
  w.close();  // idempotent
  EXPECT_THROW(w.append_events({}), Error);
  EXPECT_THROW(w.flush(), Error);
}

// A child writes steps as fast as it can (most of its time is inside flush) and reports each completed
// flush on a pipe; the parent SIGKILLs it at a random moment. Every reported step must read back complete
// and exact, with the C++ reader and with h5py; no step row may lack its events.
TEST(TraceIO, KilledWriterLeavesEveryFlushedStep) {
  const int ranks = 4, microbatches = 20;  // 480 events per step
  std::mt19937 rng(12345);
  for (int round = 0; round < 5; ++round) {
    const test_support::ScratchDir dir("conductor_trace");
    std::string path = (dir / "trace.h5").string();
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      close(fds[0]);
      try {
        TraceWriter w(path, sample_info());
        for (int s = 0; s < 1000000; ++s) {
          auto ev = step_events(s, ranks, microbatches);
          w.append_events(ev);
          w.append_step(step_record(ev, s, ranks));
          w.flush();
          if (write(fds[1], &s, sizeof s) != sizeof s) _exit(3);
        }
      } catch (...) {
        _exit(4);
      }
      _exit(0);
    }
    close(fds[1]);
    int want = 1 + round * 4;  // let some steps complete first
    int last = -1, s = 0;
    while (last + 1 < want && read(fds[0], &s, sizeof s) == sizeof s) last = s;
    std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, 3000)(rng)));
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended before it was killed, status " << status;
    while (read(fds[0], &s, sizeof s) == sizeof s) last = s;
    close(fds[0]);
    ASSERT_GE(last, 0);

    Trace t = read_trace(path);
    ASSERT_GE(static_cast<int>(t.steps.size()), last + 1) << "round " << round;
    size_t row = 0;
    for (size_t k = 0; k < t.steps.size(); ++k) {
      auto ev = step_events(static_cast<int>(k), ranks, microbatches);
      StepRecord want_rec = step_record(ev, static_cast<int>(k), ranks);
      EXPECT_EQ(t.steps[k].step, static_cast<int>(k));
      EXPECT_EQ(t.steps[k].makespan_ns, want_rec.makespan_ns);
      EXPECT_EQ(t.steps[k].bubble_ratio, want_rec.bubble_ratio);
      ASSERT_GE(t.events.size(), row + ev.size()) << "step " << k << " is in /steps but its events are not";
      for (const auto& e : ev) expect_same(t.events[row++], e);
    }
    // Whatever follows belongs to the step being written when the kill came: a prefix of it, no garbage.
    for (size_t i = row; i < t.events.size(); ++i) EXPECT_EQ(t.events[i].step, static_cast<int>(t.steps.size()));

    if (round % 2 == 0 && have_h5py()) {  // h5py start-up is the slow part: every other round
      std::string cmd = std::string(CONDUCTOR_PYTHON) + " -c '" +
                        "import sys, h5py\n"
                        "try:\n f = h5py.File(sys.argv[1], \"r\")\n"
                        "except OSError:\n f = h5py.File(sys.argv[1], \"r\", swmr=True)\n"
                        "s = f[\"steps\"][\"step\"]; e = f[\"events\"][\"step\"]\n"
                        "print(len(s), int((e >= 0).sum()))' " +
                        path + " 2>&1";
      int st = 0;
      std::string out = run_capture(cmd, st);
      ASSERT_EQ(st, 0) << out;
      size_t valid_events = 0;
      for (const auto& e : t.events) valid_events += e.step >= 0;
      EXPECT_EQ(out, std::to_string(t.steps.size()) + " " + std::to_string(valid_events) + "\n");
    }
  }
}

// A run killed while it reopened its trace to continue it (open for writing, before SWMR writing started) leaves
// the plain "open for write" mark, which a SWMR reader refuses too: a resume said the trace "cannot be read" and
// read_trace failed. Both read past the mark now, and the resume continues it.
TEST(TraceIO, TraceLeftOpenByAKilledResumeIsReadAndContinued) {
  const test_support::ScratchDir dir("conductor_trace");
  const std::string path = (dir / "trace.h5").string();
  {
    TraceWriter w(path, sample_info());
    for (int s = 0; s < 3; ++s) {
      auto ev = step_events(s, 2, 4);
      w.append_events(ev);
      w.append_step(step_record(ev, s, 2));
    }
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // opens it for writing, as a resume does first, and dies there
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, false, true);
    _exit(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl) >= 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  hid_t probe = H5Fopen(path.c_str(), H5F_ACC_RDONLY | H5F_ACC_SWMR_READ, H5P_DEFAULT);
  H5Eclear2(H5E_DEFAULT);
  ASSERT_LT(probe, 0) << "the file is not marked as a killed plain writer leaves it";
  EXPECT_EQ(read_trace(path).steps.size(), 3u);
  {
    TraceWriter w(path, 3);
    auto ev = step_events(3, 2, 4);
    w.append_events(ev);
    w.append_step(step_record(ev, 3, 2));
  }
  const Trace t = read_trace(path);
  ASSERT_EQ(t.steps.size(), 4u);
  EXPECT_EQ(t.steps[3].step, 3);
}

// A trace written before /steps had stage_bubble_ratio (rewritten here without that column by h5py) is still
// read, the per-stage bubble recomputed from its events; a resumed run refuses to append to it.
TEST(TraceIO, TraceWithoutStageBubbleColumnIsReadAndNotContinued) {
  if (!have_h5py()) GTEST_SKIP() << CONDUCTOR_PYTHON << " has no h5py";
  const test_support::ScratchDir dir("conductor_trace");
  std::string path = (dir / "trace.h5").string();
  auto ev = step_events(0, 3, 4);
  StepRecord rec = step_record(ev, 0, 3);
  {
    TraceWriter w(path, sample_info());
    w.append_events(ev);
    w.append_step(rec);
  }
  std::string script = (dir / "drop.py").string();
  std::ofstream(script) << R"(import sys, h5py, numpy.lib.recfunctions as rf
with h5py.File(sys.argv[1], "r+") as f:
    old = rf.drop_fields(f["steps"][:], "stage_bubble_ratio", usemask=False)
    del f["steps"]
    f.create_dataset("steps", data=old, maxshape=(None,), chunks=(128,))
)";
  int status = 0;
  std::string out = run_capture(std::string(CONDUCTOR_PYTHON) + " " + script + " " + path + " 2>&1", status);
  ASSERT_EQ(status, 0) << out;
  const Trace t = read_trace(path);
  ASSERT_EQ(t.steps.size(), 1u);
  EXPECT_EQ(t.steps[0].bubble_ratio, rec.bubble_ratio);
  EXPECT_GT(rec.stage_bubble_ratio, 0.0);
  EXPECT_EQ(t.steps[0].stage_bubble_ratio, rec.stage_bubble_ratio);
  try {
    TraceWriter w(path, 1);
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("stage_bubble_ratio"), std::string::npos) << e.what();
  }
}

// /events and /steps describe themselves (docs/trace.md, "Dataset attributes"): units and meanings aligned with
// the fields, the clock, and its UNIX epoch where it has one. A trace without them (an older build) still reads.
TEST(TraceIO, DatasetAttributesGiveUnitsAndClockAndOldTracesStillRead) {
  if (!have_h5py()) GTEST_SKIP() << CONDUCTOR_PYTHON << " has no h5py";
  const test_support::ScratchDir dir("conductor_trace");
  const std::string runtime = (dir / "runtime.h5").string(), sim = (dir / "sim.h5").string();
  auto ev = step_events(0, 2, 2);
  RunInfo info = sample_info();
  info.clock = "test clock";
  info.epoch_unix_ns = 1'700'000'000'123'456'789LL;
  for (const auto& [path, with_epoch] : {std::pair{runtime, true}, std::pair{sim, false}}) {
    RunInfo i = info;
    if (!with_epoch) i.epoch_unix_ns.reset();
    TraceWriter w(path, i);
    w.append_events(ev);
    w.append_step(step_record(ev, 0, 2));
  }
  std::string script = (dir / "attrs.py").string();
  std::ofstream(script) << R"(import sys, h5py
for path in sys.argv[1:3]:
    with h5py.File(path, "r") as f:
        for name in ("events", "steps"):
            d = f[name]
            a = d.attrs
            names = [str(n) for n in a["field_names"]]
            assert names == list(d.dtype.names), (names, d.dtype.names)
            assert len(a["field_units"]) == len(names) and len(a["field_descriptions"]) == len(names)
            assert all(len(x) > 0 for x in a["field_descriptions"])
            units = dict(zip(names, a["field_units"]))
            for field, unit in units.items():
                assert (unit == "ns") == field.endswith("_ns"), (field, unit)
            assert len(a["description"]) > 0
            print(name, units.get("bytes", units.get("samples_per_s")), a["clock"], int(a["epoch_unix_ns"]) if "epoch_unix_ns" in a else "none")
with h5py.File(sys.argv[2], "r+") as f:  # as written before the attributes existed
    for name in ("events", "steps"):
        for k in list(f[name].attrs):
            del f[name].attrs[k]
)";
  int status = 0;
  std::string out =
      run_capture(std::string(CONDUCTOR_PYTHON) + " " + script + " " + runtime + " " + sim + " 2>&1", status);
  ASSERT_EQ(status, 0) << out;
  EXPECT_EQ(out,
            "events B test clock 1700000000123456789\nsteps samples/s test clock 1700000000123456789\n"
            "events B test clock none\nsteps samples/s test clock none\n");
  const Trace with = read_trace(runtime);
  EXPECT_EQ(with.info.clock, "test clock");
  EXPECT_EQ(with.info.epoch_unix_ns, info.epoch_unix_ns);
  const Trace t = read_trace(sim);
  EXPECT_EQ(t.info.clock, "");
  EXPECT_FALSE(t.info.epoch_unix_ns.has_value());
  ASSERT_EQ(t.events.size(), ev.size());
  for (size_t i = 0; i < ev.size(); ++i) expect_same(t.events[i], ev[i]);
  ASSERT_EQ(t.steps.size(), 1u);
}
