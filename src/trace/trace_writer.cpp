#include "conductor/trace/trace_writer.hpp"

#include <cstdint>
#include <string>

#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "h5schema.hpp"
#include "h5util.hpp"

namespace conductor::trace {

namespace {

// Rows per chunk. Every flush recompresses the partial last chunk, so a chunk is kept near one step's
// worth of events (p=8, m=24: ~1000 events); /steps gets one row per step.
constexpr hsize_t kEventChunkRows = 1024;
constexpr hsize_t kStepChunkRows = 128;
constexpr unsigned kGzipLevel = 4;

void write_string_attr(hid_t file, const std::string& path, const char* name, const std::string& value) {
  h5::Handle type = h5::vlen_string_type();
  h5::Handle space(h5::check(H5Screate(H5S_SCALAR), path, "H5Screate"), H5Sclose);
  h5::Handle attr(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail(path, std::string("H5Acreate2(") + name + ")");
  const char* data = value.c_str();
  h5::check_status(H5Awrite(attr.get(), type.get(), &data), path, "H5Awrite");
}

void write_int_attr(hid_t file, const std::string& path, const char* name, std::int32_t value) {
  h5::Handle space(h5::check(H5Screate(H5S_SCALAR), path, "H5Screate"), H5Sclose);
  h5::Handle attr(H5Acreate2(file, name, H5T_STD_I32LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail(path, std::string("H5Acreate2(") + name + ")");
  h5::check_status(H5Awrite(attr.get(), H5T_NATIVE_INT32, &value), path, "H5Awrite");
}

void write_strings_attr(hid_t file, const std::string& path, const char* name,
                        const std::vector<std::string>& values) {
  h5::Handle type = h5::vlen_string_type();
  hsize_t n = values.size();
  h5::Handle space(h5::check(H5Screate_simple(1, &n, nullptr), path, "H5Screate_simple"), H5Sclose);
  h5::Handle attr(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail(path, std::string("H5Acreate2(") + name + ")");
  std::vector<const char*> data;
  for (const std::string& v : values) data.push_back(v.c_str());
  if (!data.empty()) h5::check_status(H5Awrite(attr.get(), type.get(), data.data()), path, "H5Awrite");
}

// Rows past the last flush that a killed run may leave allocated read back as this fill (step = -1), so
// readers can tell them from real rows; docs/trace.md tells readers to drop them.
h5::Handle create_table(hid_t file, const std::string& path, const char* name, hid_t file_type,
                        hsize_t chunk_rows, hid_t mem_type, const void* fill) {
  hsize_t dims = 0, maxdims = H5S_UNLIMITED;
  h5::Handle space(h5::check(H5Screate_simple(1, &dims, &maxdims), path, "H5Screate_simple"), H5Sclose);
  h5::Handle dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_chunk(dcpl.get(), 1, &chunk_rows), path, "H5Pset_chunk");
  h5::check_status(H5Pset_shuffle(dcpl.get()), path, "H5Pset_shuffle");
  h5::check_status(H5Pset_deflate(dcpl.get(), kGzipLevel), path, "H5Pset_deflate");
  h5::check_status(H5Pset_fill_value(dcpl.get(), mem_type, fill), path, "H5Pset_fill_value");
  h5::Handle dset(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) h5::fail(path, std::string("H5Dcreate2(") + name + ")");
  return dset;
}

// Appends rows to a 1-D extendible dataset: grow the extent, then write the new rows at the end.
void append_rows(hid_t dset, hid_t mem_type, const std::string& path, hsize_t& rows, const void* data,
                 hsize_t count) {
  if (count == 0) return;
  hsize_t new_rows = rows + count;
  h5::check_status(H5Dset_extent(dset, &new_rows), path, "H5Dset_extent");
  h5::Handle file_space(h5::check(H5Dget_space(dset), path, "H5Dget_space"), H5Sclose);
  h5::check_status(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &rows, nullptr, &count, nullptr), path,
                   "H5Sselect_hyperslab");
  h5::Handle mem_space(h5::check(H5Screate_simple(1, &count, nullptr), path, "H5Screate_simple"), H5Sclose);
  h5::check_status(H5Dwrite(dset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, data), path, "H5Dwrite");
  rows = new_rows;
}

}  // namespace

struct TraceWriter::Impl {
  std::string path;
  h5::Handle file, events, steps, event_mem, step_mem;
  hsize_t event_rows = 0, step_rows = 0;
  std::vector<OpEvent> pending_events;
  std::vector<StepRecord> pending_steps;
};

TraceWriter::TraceWriter(const std::string& path, const RunInfo& info) : impl_(std::make_unique<Impl>()) {
  h5::Silence silence;
  Impl& m = *impl_;
  m.path = path;
  // SWMR-write mode is what makes a killed run's file readable: the library then orders its metadata
  // writes so the file on disk is always a consistent snapshot, and never reuses the space of a chunk it
  // rewrote (the partial last chunk is recompressed at every flush) while old metadata may point to it.
  // SWMR needs the 1.10 file format. File locking is off: it fails on some parallel file systems and we
  // are the only writer.
  h5::Handle fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), path,
                   "H5Pset_libver_bounds");
  h5::check_status(H5Pset_file_locking(fapl.get(), false, true), path, "H5Pset_file_locking");
  m.file = h5::Handle(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (!m.file.valid()) h5::fail(path, "H5Fcreate");
  hid_t f = m.file.get();

  write_int_attr(f, path, "schema_version", kSchemaVersion);
  write_string_attr(f, path, "deck", info.deck);
  write_int_attr(f, path, "world_size", info.world_size);
  write_string_attr(f, path, "schedule", info.schedule);
  write_string_attr(f, path, "execution", info.execution);
  write_string_attr(f, path, "hint", info.hint);
  write_string_attr(f, path, "backend", info.backend);
  write_string_attr(f, path, "source", info.source);
  write_strings_attr(f, path, "hostnames", info.hostnames);
  write_string_attr(f, path, "git_revision", info.git_revision);
  write_int_attr(f, path, "pipeline", info.pipeline);
  write_int_attr(f, path, "microbatches", info.microbatches);
  write_int_attr(f, path, "virtual", info.virtual_chunks);

  h5::Handle event_file = h5::event_type(true);
  h5::Handle step_file = h5::step_type(true);
  m.event_mem = h5::event_type(false);
  m.step_mem = h5::step_type(false);
  OpEvent event_fill;
  event_fill.step = -1;
  StepRecord step_fill;
  step_fill.step = -1;
  m.events = create_table(f, path, "events", event_file.get(), kEventChunkRows, m.event_mem.get(), &event_fill);
  m.steps = create_table(f, path, "steps", step_file.get(), kStepChunkRows, m.step_mem.get(), &step_fill);
  h5::check_status(H5Fstart_swmr_write(f), path, "H5Fstart_swmr_write");
}

TraceWriter::~TraceWriter() {
  if (!impl_) return;
  try {
    close();
  } catch (const std::exception& e) {
    log::warn(std::string("closing the trace: ") + e.what());
  }
}

TraceWriter::TraceWriter(TraceWriter&&) noexcept = default;
TraceWriter& TraceWriter::operator=(TraceWriter&& other) noexcept {
  if (this != &other) {
    if (impl_) {
      try {
        close();
      } catch (const std::exception& e) {
        log::warn(std::string("closing the trace: ") + e.what());
      }
    }
    impl_ = std::move(other.impl_);
  }
  return *this;
}

TraceWriter::Impl& TraceWriter::live(const char* what) const {
  if (!impl_) throw Error(std::string("TraceWriter::") + what + " on a moved-from writer");
  if (!impl_->file.valid()) throw Error("trace " + impl_->path + ": " + what + " after close()");
  return *impl_;
}

void TraceWriter::append_events(const std::vector<OpEvent>& events) {
  Impl& m = live("append_events");
  m.pending_events.insert(m.pending_events.end(), events.begin(), events.end());
}

void TraceWriter::append_step(const StepRecord& step) {
  Impl& m = live("append_step");
  m.pending_steps.push_back(step);
}

void TraceWriter::flush() {
  Impl& m = live("flush");
  h5::Silence silence;
  // Events reach the disk before the step rows that summarize them (two flushes): a killed run's file
  // never holds a row in /steps whose events are missing from /events.
  append_rows(m.events.get(), m.event_mem.get(), m.path, m.event_rows, m.pending_events.data(),
              m.pending_events.size());
  m.pending_events.clear();
  h5::check_status(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), m.path, "H5Fflush");
  if (!m.pending_steps.empty()) {
    append_rows(m.steps.get(), m.step_mem.get(), m.path, m.step_rows, m.pending_steps.data(),
                m.pending_steps.size());
    m.pending_steps.clear();
    h5::check_status(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), m.path, "H5Fflush");
  }
}

void TraceWriter::close() {
  if (!impl_ || !impl_->file.valid()) return;
  flush();
  h5::Silence silence;
  Impl& m = *impl_;
  m.events.reset();
  m.steps.reset();
  if (m.file.reset() < 0) h5::fail(m.path, "H5Fclose");
}

const std::string& TraceWriter::path() const {
  if (!impl_) throw Error("TraceWriter::path on a moved-from writer");
  return impl_->path;
}
std::int64_t TraceWriter::events_written() const { return impl_ ? static_cast<std::int64_t>(impl_->event_rows) : 0; }
std::int64_t TraceWriter::steps_written() const { return impl_ ? static_cast<std::int64_t>(impl_->step_rows) : 0; }

}  // namespace conductor::trace
