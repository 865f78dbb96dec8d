#pragma once
// The HDF5 trace file (<output>/trace.h5) written by the MPI runtime (rank 0) and by the simulator.
// Layout, units and the durability guarantee are documented in docs/trace.md; this is the only writer.
//
//   trace::TraceWriter w(path, info);      // creates the file (truncates), writes the root attributes
//   trace::TraceWriter w(path, first_step);  // or continues an existing trace (a resumed run, docs/trace.md)
//   w.append_events(events_of_step);       // any number of times per step
//   w.append_step(summarize_step(...));    // once per step
//   w.flush();                             // at the end of every step: everything appended so far is on disk
//
// A process killed at any point (even inside flush) leaves every step whose flush() returned readable.
// Errors throw conductor::Error naming the path and the HDF5 call that failed; HDF5's own error-stack
// printing is silenced.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conductor/trace/event.hpp"

namespace conductor::trace {

// Whether the trace at `path` can be continued (TraceWriter(path, first_step) checks it first, before writing):
// InputError naming the file and what is wrong with it (not HDF5, a table missing or unreadable, a killed writer's
// mark this HDF5 cannot clear). Reads every row.
void check_continuable(const std::string& path);

class TraceWriter {
 public:
  TraceWriter(const std::string& path, const RunInfo& info);
  // Continues the trace at `path` (a run resumed at first_step): keeps its attributes and every row of steps
  // before first_step, drops the rows of steps from first_step on (a previous attempt ran past the checkpoint
  // it resumes from), and appends from there. Throws InputError naming the file when it is not a trace.
  TraceWriter(const std::string& path, int first_step);
  ~TraceWriter();  // closes the file; errors at that point are logged, not thrown (use close() to see them)
  TraceWriter(TraceWriter&&) noexcept;
  TraceWriter& operator=(TraceWriter&&) noexcept;
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Buffer records in memory; nothing touches the file until flush().
  void append_events(const std::vector<OpEvent>& events);
  void append_step(const StepRecord& step);
  // Write the buffered records to /events and /steps and make the file consistent on disk (H5Fflush).
  void flush();
  // flush() and close the file; further appends throw. Idempotent.
  void close();

  const std::string& path() const;
  std::int64_t events_written() const;  // rows in /events on disk (after the last flush)
  std::int64_t steps_written() const;   // rows in /steps on disk

 private:
  struct Impl;
  Impl& live(const char* what) const;  // the open file's state, or throws
  static void write_pending(Impl& m);  // flush()'s writes
  std::unique_ptr<Impl> impl_;
};

}  // namespace conductor::trace
