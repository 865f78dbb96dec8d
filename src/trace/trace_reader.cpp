#include "conductor/trace/trace_reader.hpp"

#include <array>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "conductor/trace/summary.hpp"
#include "conductor/util/error.hpp"
#include "h5schema.hpp"
#include "h5util.hpp"

namespace conductor::trace {

namespace {

[[noreturn]] void malformed(const std::string& path, const std::string& what) {
  throw InputError("trace " + path + ": " + what + " (see docs/trace.md)");
}

h5::Handle open_attr(hid_t file, const std::string& path, const char* name) {
  htri_t exists = H5Aexists(file, name);
  if (exists < 0) h5::fail_input(path, "H5Aexists");
  if (exists == 0) malformed(path, std::string("missing root attribute '") + name + "'");
  h5::Handle attr(H5Aopen(file, name, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail_input(path, std::string("H5Aopen(") + name + ")");
  return attr;
}

std::int32_t read_int_attr(hid_t file, const std::string& path, const char* name) {
  h5::Handle attr = open_attr(file, path, name);
  h5::Handle type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER)
    malformed(path, std::string("root attribute '") + name + "' is not an integer");
  std::int32_t value = 0;
  if (H5Aread(attr.get(), H5T_NATIVE_INT32, &value) < 0) h5::fail_input(path, std::string("H5Aread(") + name + ")");
  return value;
}

std::vector<std::string> read_strings_attr(hid_t file, const std::string& path, const char* name) {
  h5::Handle attr = open_attr(file, path, name);
  h5::Handle file_type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(file_type.get()) != H5T_STRING)
    malformed(path, std::string("root attribute '") + name + "' is not a string");
  h5::Handle space(H5Aget_space(attr.get()), H5Sclose);
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<std::string> out;
  if (n <= 0) return out;
  if (H5Tis_variable_str(file_type.get()) > 0) {
    h5::Handle mem = h5::vlen_string_type();
    std::vector<char*> data(static_cast<std::size_t>(n), nullptr);
    if (H5Aread(attr.get(), mem.get(), data.data()) < 0) h5::fail_input(path, std::string("H5Aread(") + name + ")");
    for (char* s : data) out.emplace_back(s ? s : "");
    H5Dvlen_reclaim(mem.get(), space.get(), H5P_DEFAULT, data.data());
  } else {  // fixed-length strings (e.g. written by h5py with numpy bytes)
    std::size_t size = H5Tget_size(file_type.get());
    h5::Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.get(), size + 1);
    std::vector<char> data(static_cast<std::size_t>(n) * (size + 1), '\0');
    if (H5Aread(attr.get(), mem.get(), data.data()) < 0) h5::fail_input(path, std::string("H5Aread(") + name + ")");
    for (hssize_t i = 0; i < n; ++i) out.emplace_back(data.data() + static_cast<std::size_t>(i) * (size + 1));
  }
  return out;
}

std::string read_string_attr(hid_t file, const std::string& path, const char* name) {
  std::vector<std::string> v = read_strings_attr(file, path, name);
  return v.empty() ? std::string() : v.front();
}

// The clock of the *_ns times, from /events' attributes (docs/trace.md, "Dataset attributes"); a trace written
// before they existed leaves clock "" and no epoch.
void read_clock(hid_t file, const std::string& path, RunInfo& info) {
  info.clock.clear();
  info.epoch_unix_ns.reset();
  h5::Handle events(H5Dopen2(file, "events", H5P_DEFAULT), H5Dclose);
  if (!events.valid()) return;  // read_table names the missing dataset
  if (H5Aexists(events.get(), "clock") > 0) info.clock = read_string_attr(events.get(), path, "clock");
  if (H5Aexists(events.get(), "epoch_unix_ns") > 0) {
    h5::Handle attr = open_attr(events.get(), path, "epoch_unix_ns");
    std::int64_t value = 0;
    if (H5Aread(attr.get(), H5T_NATIVE_INT64, &value) < 0) h5::fail_input(path, "H5Aread(epoch_unix_ns)");
    info.epoch_unix_ns = value;
  }
}

template <typename Row, std::size_t N>
std::vector<Row> read_table(hid_t file, const std::string& path, const char* name,
                            const std::array<std::string_view, N>& fields, const h5::Handle& mem_type) {
  htri_t exists = H5Lexists(file, name, H5P_DEFAULT);
  if (exists <= 0) malformed(path, std::string("missing dataset '/") + name + "'");
  h5::Handle dset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) h5::fail_input(path, std::string("H5Dopen2(/") + name + ")");
  h5::Handle file_type(H5Dget_type(dset.get()), H5Tclose);
  if (H5Tget_class(file_type.get()) != H5T_COMPOUND)
    malformed(path, std::string("dataset '/") + name + "' is not a compound table");
  for (std::string_view field : fields) {
    if (H5Tget_member_index(file_type.get(), std::string(field).c_str()) < 0) {
      malformed(path, "dataset '/" + std::string(name) + "' has no field '" + std::string(field) + "'");
    }
  }
  h5::Handle space(H5Dget_space(dset.get()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.get()) != 1) malformed(path, std::string("dataset '/") + name + "' is not 1-D");
  hssize_t n = H5Sget_simple_extent_npoints(space.get());
  std::vector<Row> rows(static_cast<std::size_t>(n));
  if (n > 0 && H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, rows.data()) < 0) {
    h5::fail_input(path, std::string("H5Dread(/") + name + ")");
  }
  return rows;
}

bool table_has_field(hid_t file, const std::string& path, const char* name, std::string_view field) {
  h5::Handle dset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) h5::fail_input(path, std::string("H5Dopen2(/") + name + ")");
  h5::Handle file_type(H5Dget_type(dset.get()), H5Tclose);
  return H5Tget_member_index(file_type.get(), std::string(field).c_str()) >= 0;
}

// A trace written before /steps had the per-stage bubble: recompute it from the step's events (the same
// definition, trace::summarize_step); NaN where the events do not give it.
void fill_stage_bubble(Trace& t) {
  std::map<int, std::vector<std::size_t>> at;  // step -> its events, so each step costs its own events only
  for (std::size_t i = 0; i < t.events.size(); ++i) at[t.events[i].step].push_back(i);
  std::vector<OpEvent> mine;
  for (StepRecord& s : t.steps) {
    mine.clear();
    if (auto it = at.find(s.step); it != at.end()) {
      for (std::size_t i : it->second) mine.push_back(t.events[i]);
    }
    try {
      s.stage_bubble_ratio = summarize_step(mine, t.info.world_size, s.step, 0.0).stage_bubble_ratio;
    } catch (const Error&) {
      s.stage_bubble_ratio = std::nan("");
    }
  }
}

// The trace at `path` opened to read (the caller silences HDF5). A run killed while writing leaves the file marked
// open for writing: read past the mark (h5util.hpp).
h5::Handle open_to_read(const std::string& path) {
  h5::Handle fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_file_locking(fapl.get(), false, true);
  std::string plain;
  h5::Handle file = h5::open_read_only(path, fapl.get(), plain);
  if (!file.valid()) throw InputError("trace " + path + ": H5Fopen failed: " + plain);
  return file;
}

}  // namespace

Trace read_trace(const std::string& path) {
  h5::Silence silence;
  const h5::Handle file = open_to_read(path);
  hid_t f = file.get();

  Trace t;
  t.schema_version = read_int_attr(f, path, "schema_version");
  if (t.schema_version < 1 || t.schema_version > kSchemaVersion) {
    malformed(path, "schema_version " + std::to_string(t.schema_version) + " is not supported (this build reads 1.." +
                        std::to_string(kSchemaVersion) + ")");
  }
  t.info.deck = read_string_attr(f, path, "deck");
  t.info.world_size = read_int_attr(f, path, "world_size");
  t.info.schedule = read_string_attr(f, path, "schedule");
  t.info.execution = read_string_attr(f, path, "execution");
  t.info.hint = read_string_attr(f, path, "hint");
  t.info.backend = read_string_attr(f, path, "backend");
  t.info.source = read_string_attr(f, path, "source");
  t.info.hostnames = read_strings_attr(f, path, "hostnames");
  t.info.git_revision = read_string_attr(f, path, "git_revision");
  t.info.pipeline = read_int_attr(f, path, "pipeline");
  t.info.microbatches = read_int_attr(f, path, "microbatches");
  t.info.virtual_chunks = read_int_attr(f, path, "virtual");
  read_clock(f, path, t.info);

  h5::Handle event_mem = h5::event_type(false);
  h5::Handle step_mem = h5::step_type(false);
  t.events = read_table<OpEvent>(f, path, "events", h5::kEventFields, event_mem);
  t.steps = read_table<StepRecord>(f, path, "steps", h5::kStepFields, step_mem);
  // Unwritten fill rows (step = -1) can only appear in the trace of a killed run; they are not records.
  std::erase_if(t.events, [](const OpEvent& e) { return e.step < 0; });
  std::erase_if(t.steps, [](const StepRecord& s) { return s.step < 0; });
  if (!table_has_field(f, path, "steps", h5::kStageBubbleField)) fill_stage_bubble(t);
  return t;
}

std::vector<int> read_step_numbers(const std::string& path) {
  h5::Silence silence;
  const h5::Handle file = open_to_read(path);
  // A memory type of the one field: HDF5 converts the rows' step column alone.
  h5::Handle mem(H5Tcreate(H5T_COMPOUND, sizeof(std::int32_t)), H5Tclose);
  H5Tinsert(mem.get(), "step", 0, H5T_NATIVE_INT32);
  const std::vector<std::int32_t> rows =
      read_table<std::int32_t>(file.get(), path, "steps", std::array<std::string_view, 1>{"step"}, mem);
  std::vector<int> steps;
  for (const std::int32_t s : rows) {
    if (s >= 0) steps.push_back(s);
  }
  return steps;
}

}  // namespace conductor::trace
