#include "conductor/trace/trace_writer.hpp"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "conductor/util/error.hpp"
#include "conductor/util/log.hpp"
#include "h5schema.hpp"
#include "h5util.hpp"

namespace conductor::trace {

// How rows reach the file (docs/trace.md, "Durability" and "Cost"):
//  * SWMR-write mode: the library orders its metadata writes so the file on disk is always a consistent
//    snapshot, and never frees the space of a chunk it replaced. Without it, a SIGKILL inside flush()
//    corrupts the last completed chunk (tests/trace: KilledWriterLeavesEveryFlushedStep caught this:
//    "inflate() failed" on rows flushed steps earlier), because the partial last chunk is rewritten at
//    every flush and its old space gets reused before the new index reaches the disk.
//  * Rows are packed to the file's byte layout and chunks are shuffled and deflated here, with one zlib
//    stream reused for the whole run, then stored with H5Dwrite_chunk. Readers see ordinary
//    shuffle+deflate chunks. Going through H5Dwrite instead costs ~10x more on a VM: HDF5's deflate
//    filter calls compress2, which allocates and zeroes ~270 KB of zlib state per chunk, and a
//    converting write zeroes ~1 MB of conversion buffers per call (bench/bench_trace.cpp measures).
static_assert(std::endian::native == std::endian::little, "the trace's file types are little-endian");

namespace {

// Chunk sizes. Every flush rewrites the partial last chunk whole, and SWMR keeps the space of every copy it
// replaced (above), so a table grows by about one partial chunk per flush on top of its rows: a chunk far larger
// than a step's rows made a small deck's trace 5-15x its rows (a 40-event step rewrote up to 1024 rows 25 times).
// /events' chunk is sized to a step's compute ops (3 p m v, the transfers come on top), a power of two between
// 64 and 1024 rows (~62 KB raw); /steps, one row per flush, holds 8 rows a chunk.
constexpr hsize_t kEventChunkRowsMin = 64, kEventChunkRowsMax = 1024;
constexpr hsize_t kStepChunkRows = 8;

hsize_t event_chunk_rows(const RunInfo& info) {
  const double ops =
      3.0 * std::max(1, info.pipeline) * std::max(1, info.microbatches) * std::max(1, info.virtual_chunks);
  if (ops >= static_cast<double>(kEventChunkRowsMax)) return kEventChunkRowsMax;
  return std::clamp<hsize_t>(std::bit_ceil(static_cast<hsize_t>(ops)), kEventChunkRowsMin, kEventChunkRowsMax);
}
constexpr int kGzipLevel = 1;  // level 4 costs ~2x the time for ~15% smaller files

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

void write_strings_attr(hid_t file, const std::string& path, const char* name, const std::vector<std::string>& values) {
  h5::Handle type = h5::vlen_string_type();
  hsize_t n = values.size();
  h5::Handle space(h5::check(H5Screate_simple(1, &n, nullptr), path, "H5Screate_simple"), H5Sclose);
  h5::Handle attr(H5Acreate2(file, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail(path, std::string("H5Acreate2(") + name + ")");
  std::vector<const char*> data;
  for (const std::string& v : values) data.push_back(v.c_str());
  if (!data.empty()) h5::check_status(H5Awrite(attr.get(), type.get(), data.data()), path, "H5Awrite");
}

void write_int64_attr(hid_t loc, const std::string& path, const char* name, std::int64_t value) {
  h5::Handle space(h5::check(H5Screate(H5S_SCALAR), path, "H5Screate"), H5Sclose);
  h5::Handle attr(H5Acreate2(loc, name, H5T_STD_I64LE, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) h5::fail(path, std::string("H5Acreate2(") + name + ")");
  h5::check_status(H5Awrite(attr.get(), H5T_NATIVE_INT64, &value), path, "H5Awrite");
}

// Self-description of a table (docs/trace.md, "Dataset attributes"): what it holds, each field's unit and
// meaning (arrays in the field order), and the clock its *_ns times are read on. Readers need none of it.
void write_table_docs(hid_t dset, const std::string& path, const std::string& description,
                      const std::vector<h5::FieldDoc>& fields, const RunInfo& info) {
  std::vector<std::string> names, units, meanings;
  for (const h5::FieldDoc& f : fields) {
    names.emplace_back(f.name);
    units.emplace_back(f.unit);
    meanings.emplace_back(f.description);
  }
  write_string_attr(dset, path, "description", description);
  write_strings_attr(dset, path, "field_names", names);
  write_strings_attr(dset, path, "field_units", units);
  write_strings_attr(dset, path, "field_descriptions", meanings);
  write_string_attr(dset, path, "clock", info.clock);
  if (info.epoch_unix_ns) write_int64_attr(dset, path, "epoch_unix_ns", *info.epoch_unix_ns);
}

// Copies C++ records into the file's packed byte layout (same member names and sizes, other offsets).
struct Packer {
  struct Field {
    size_t mem_offset, file_offset, size;
  };
  std::vector<Field> fields;
  size_t row_size = 0;

  Packer(hid_t mem, hid_t file) {
    row_size = H5Tget_size(file);
    int n = H5Tget_nmembers(file);
    for (int i = 0; i < n; ++i) {
      unsigned fi = static_cast<unsigned>(i);
      char* name = H5Tget_member_name(file, fi);
      int mi = H5Tget_member_index(mem, name);
      H5free_memory(name);
      if (mi < 0) throw std::logic_error("trace: memory and file record layouts disagree");
      h5::Handle mt(H5Tget_member_type(mem, static_cast<unsigned>(mi)), H5Tclose);
      h5::Handle ft(H5Tget_member_type(file, fi), H5Tclose);
      if (H5Tget_size(mt.get()) != H5Tget_size(ft.get())) {
        throw std::logic_error("trace: memory and file record layouts disagree");
      }
      fields.push_back({H5Tget_member_offset(mem, static_cast<unsigned>(mi)), H5Tget_member_offset(file, fi),
                        H5Tget_size(ft.get())});
    }
  }

  template <typename Row>
  void pack_into(const Row* rows, size_t count, std::vector<unsigned char>& out) const {
    size_t at = out.size();
    out.resize(at + count * row_size);
    unsigned char* dst = out.data() + at;
    for (size_t r = 0; r < count; ++r) {
      const auto* src = reinterpret_cast<const unsigned char*>(&rows[r]);
      for (const Field& f : fields) std::memcpy(dst + f.file_offset, src + f.mem_offset, f.size);
      dst += row_size;
    }
  }
};

// One zlib stream for the whole run (deflateReset per chunk allocates nothing).
class Deflater {
 public:
  Deflater() {
    if (deflateInit(&z_, kGzipLevel) != Z_OK) throw Error("trace: zlib deflateInit failed");
  }
  ~Deflater() { deflateEnd(&z_); }
  Deflater(const Deflater&) = delete;
  Deflater& operator=(const Deflater&) = delete;

  // zlib-format stream, exactly what HDF5's deflate filter decodes.
  const std::vector<unsigned char>& compress(const std::vector<unsigned char>& in) {
    out_.resize(deflateBound(&z_, in.size()));
    deflateReset(&z_);
    z_.next_in = const_cast<unsigned char*>(in.data());
    z_.avail_in = static_cast<uInt>(in.size());
    z_.next_out = out_.data();
    z_.avail_out = static_cast<uInt>(out_.size());
    if (deflate(&z_, Z_FINISH) != Z_STREAM_END) throw Error("trace: zlib deflate failed");
    out_.resize(z_.total_out);
    return out_;
  }

 private:
  z_stream z_{};
  std::vector<unsigned char> out_;
};

// A 1-D extendible table of fixed-size rows, written chunk by chunk.
struct Table {
  h5::Handle dset;
  size_t row_size = 0;
  hsize_t chunk_rows = 0;
  hsize_t rows = 0;                  // extent on disk
  hsize_t tail_start = 0;            // first row of the chunk being filled
  std::vector<unsigned char> tail;   // packed rows [tail_start, rows + pending)
  std::vector<unsigned char> fill;   // one packed fill row (step = -1)
  std::vector<unsigned char> chunk;  // scratch: one full chunk, then its shuffled form
  std::vector<unsigned char> shuffled;

  // Shuffles (HDF5's byte-shuffle filter: byte b of every element together) and deflates one full chunk.
  void write_chunk(const std::string& path, Deflater& zip, const unsigned char* rows_data, size_t nrows,
                   hsize_t first_row) {
    size_t n = static_cast<size_t>(chunk_rows);
    chunk.assign(rows_data, rows_data + nrows * row_size);
    for (size_t r = nrows; r < n; ++r) chunk.insert(chunk.end(), fill.begin(), fill.end());
    shuffled.resize(n * row_size);
    for (size_t b = 0; b < row_size; ++b) {
      unsigned char* dst = shuffled.data() + b * n;
      const unsigned char* src = chunk.data() + b;
      for (size_t i = 0; i < n; ++i) dst[i] = src[i * row_size];
    }
    const std::vector<unsigned char>& z = zip.compress(shuffled);
    hsize_t offset = first_row;
    h5::check_status(H5Dwrite_chunk(dset.get(), H5P_DEFAULT, 0, &offset, z.size(), z.data()), path, "H5Dwrite_chunk");
  }

  // Appends packed rows: grows the extent, writes every chunk they complete, then the partial last one.
  void append(const std::string& path, Deflater& zip, const std::vector<unsigned char>& packed) {
    size_t count = packed.size() / row_size;
    if (count == 0) return;
    hsize_t new_rows = rows + count;
    h5::check_status(H5Dset_extent(dset.get(), &new_rows), path, "H5Dset_extent");
    tail.insert(tail.end(), packed.begin(), packed.end());
    size_t chunk_bytes = static_cast<size_t>(chunk_rows) * row_size;
    size_t done = 0;
    while (tail.size() - done >= chunk_bytes) {
      write_chunk(path, zip, tail.data() + done, static_cast<size_t>(chunk_rows), tail_start);
      done += chunk_bytes;
      tail_start += chunk_rows;
    }
    tail.erase(tail.begin(), tail.begin() + static_cast<std::ptrdiff_t>(done));
    if (!tail.empty()) write_chunk(path, zip, tail.data(), tail.size() / row_size, tail_start);
    rows = new_rows;
  }
};

template <typename Row>
Table create_table(hid_t file, const std::string& path, const char* name, hid_t file_type, hsize_t chunk_rows,
                   const Packer& packer, const Row& fill_row) {
  Table t;
  t.row_size = packer.row_size;
  t.chunk_rows = chunk_rows;
  packer.pack_into(&fill_row, 1, t.fill);
  hsize_t dims = 0, maxdims = H5S_UNLIMITED;
  h5::Handle space(h5::check(H5Screate_simple(1, &dims, &maxdims), path, "H5Screate_simple"), H5Sclose);
  h5::Handle dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_chunk(dcpl.get(), 1, &chunk_rows), path, "H5Pset_chunk");
  h5::check_status(H5Pset_shuffle(dcpl.get()), path, "H5Pset_shuffle");
  h5::check_status(H5Pset_deflate(dcpl.get(), kGzipLevel), path, "H5Pset_deflate");
  // Rows past the extent inside the last chunk, and any row a killed run leaves allocated but unwritten,
  // read back as this fill (step = -1); docs/trace.md tells readers to drop such rows.
  h5::check_status(H5Pset_fill_value(dcpl.get(), file_type, t.fill.data()), path, "H5Pset_fill_value");
  // We write whole chunks ourselves: HDF5's chunk cache would only hold copies.
  h5::Handle dapl(h5::check(H5Pcreate(H5P_DATASET_ACCESS), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), path, "H5Pset_chunk_cache");
  t.dset = h5::Handle(H5Dcreate2(file, name, file_type, space.get(), H5P_DEFAULT, dcpl.get(), dapl.get()), H5Dclose);
  if (!t.dset.valid()) h5::fail(path, std::string("H5Dcreate2(") + name + ")");
  return t;
}

// An existing table of a trace being continued: keeps the rows of steps before `first_step` (rows are in step
// order) and drops the rest, and reloads the partial last chunk so the next append rewrites it whole.
Table open_table(hid_t file, const std::string& path, const char* name, hid_t file_type, const Packer& packer,
                 int first_step) {
  Table t;
  t.row_size = packer.row_size;
  h5::Handle dapl(h5::check(H5Pcreate(H5P_DATASET_ACCESS), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_chunk_cache(dapl.get(), 0, 0, H5D_CHUNK_CACHE_W0_DEFAULT), path, "H5Pset_chunk_cache");
  t.dset = h5::Handle(H5Dopen2(file, name, dapl.get()), H5Dclose);
  if (!t.dset.valid()) h5::fail_input(path, std::string("H5Dopen2(") + name + ")");
  h5::Handle dcpl(h5::check(H5Dget_create_plist(t.dset.get()), path, "H5Dget_create_plist"), H5Pclose);
  if (H5Pget_chunk(dcpl.get(), 1, &t.chunk_rows) != 1) h5::fail_input(path, std::string("H5Pget_chunk(") + name + ")");
  t.fill.resize(t.row_size);
  h5::check_status(H5Pget_fill_value(dcpl.get(), file_type, t.fill.data()), path, "H5Pget_fill_value");
  h5::Handle space(h5::check(H5Dget_space(t.dset.get()), path, "H5Dget_space"), H5Sclose);
  hsize_t rows = 0;
  H5Sget_simple_extent_dims(space.get(), &rows, nullptr);
  std::vector<unsigned char> all(static_cast<size_t>(rows) * t.row_size);
  if (rows > 0) {
    h5::check_status(H5Dread(t.dset.get(), file_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()), path, "H5Dread");
  }
  const size_t step_at = H5Tget_member_offset(file_type, static_cast<unsigned>(H5Tget_member_index(file_type, "step")));
  hsize_t keep = 0;
  for (; keep < rows; ++keep) {
    std::int32_t step = 0;
    std::memcpy(&step, all.data() + static_cast<size_t>(keep) * t.row_size + step_at, sizeof step);
    if (step < 0 || step >= first_step) break;
  }
  h5::check_status(H5Dset_extent(t.dset.get(), &keep), path, "H5Dset_extent");
  t.rows = keep;
  t.tail_start = keep / t.chunk_rows * t.chunk_rows;
  t.tail.assign(all.begin() + static_cast<std::ptrdiff_t>(t.tail_start * t.row_size),
                all.begin() + static_cast<std::ptrdiff_t>(keep * t.row_size));
  return t;
}

// Throws InputError when the dataset `name` lacks a field of `file_type` (a trace written by an older build).
void require_fields(hid_t file, const std::string& path, const char* name, hid_t file_type) {
  h5::Handle dset(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) h5::fail_input(path, std::string("H5Dopen2(") + name + ")");
  h5::Handle have(H5Dget_type(dset.get()), H5Tclose);
  const int n = H5Tget_nmembers(file_type);
  for (int i = 0; i < n; ++i) {
    char* field = H5Tget_member_name(file_type, static_cast<unsigned>(i));
    const std::string wanted = field ? field : "";
    H5free_memory(field);
    if (H5Tget_member_index(have.get(), wanted.c_str()) < 0) {
      throw InputError("trace " + path + ": /" + name + " has no field '" + wanted +
                       "' (written by an older build); a resumed run cannot continue it: resume into a new "
                       "run.output folder, or move trace.h5 away");
    }
  }
}

h5::Handle file_access(const std::string& path) {
  // SWMR needs the 1.10 file format. File locking is off: it fails on some parallel file systems, and
  // this is the only writer.
  h5::Handle fapl(h5::check(H5Pcreate(H5P_FILE_ACCESS), path, "H5Pcreate"), H5Pclose);
  h5::check_status(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110), path, "H5Pset_libver_bounds");
  h5::check_status(H5Pset_file_locking(fapl.get(), false, true), path, "H5Pset_file_locking");
  return fapl;
}

}  // namespace

struct TraceWriter::Impl {
  std::string path;
  h5::Handle file;
  Table events, steps;
  std::unique_ptr<Packer> event_packer, step_packer;
  Deflater zip;
  std::vector<OpEvent> pending_events;
  std::vector<StepRecord> pending_steps;
  std::vector<unsigned char> packed;  // reused
  // A write or flush failed (a full disk, a file-size limit): reported once, by the call that failed; close()
  // then only lets go of the file (writing on would fail again and report the same thing twice).
  bool failed = false;
};

TraceWriter::TraceWriter(const std::string& path, const RunInfo& info) : impl_(std::make_unique<Impl>()) {
  h5::Silence silence;
  Impl& m = *impl_;
  m.path = path;
  h5::Handle fapl = file_access(path);
  // A new trace is this run's own file: a symbolic link in its place (to another run's trace, or dangling) is
  // replaced, never written through (H5Fcreate follows it and truncates what it names).
  std::error_code ec;
  if (std::filesystem::is_symlink(path, ec)) std::filesystem::remove(path, ec);
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

  h5::Handle event_file = h5::event_type(true), step_file = h5::step_type(true);
  h5::Handle event_mem = h5::event_type(false), step_mem = h5::step_type(false);
  m.event_packer = std::make_unique<Packer>(event_mem.get(), event_file.get());
  m.step_packer = std::make_unique<Packer>(step_mem.get(), step_file.get());
  OpEvent event_fill;
  event_fill.step = -1;
  StepRecord step_fill;
  step_fill.step = -1;
  m.events = create_table(f, path, "events", event_file.get(), event_chunk_rows(info), *m.event_packer, event_fill);
  m.steps = create_table(f, path, "steps", step_file.get(), kStepChunkRows, *m.step_packer, step_fill);
  // Attributes are created before SWMR writing starts (SWMR forbids adding them later).
  write_table_docs(m.events.dset.get(), path, "one row per op or transfer, every rank, every step",
                   h5::event_field_docs(), info);
  write_table_docs(m.steps.dset.get(), path, "one row per completed step", h5::step_field_docs(), info);
  h5::check_status(H5Fstart_swmr_write(f), path, "H5Fstart_swmr_write");
}

namespace {

// A run killed while writing (SIGKILL, a node lost, an MPI_Abort) leaves its trace marked open for SWMR writing, and
// a plain open refuses it ("file is already open for write"). Every flushed step in it is whole (the SWMR design
// above), so a resumed run continues it: read past the mark (h5::open_read_only), reopened for writing with the
// mark cleared, as `h5clear -s` clears it (h5::clear_killed_writers_mark). A run killed while it reopened the
// trace to continue it, before SWMR writing started, leaves the plain mark: the same.
using h5::clear_killed_writers_mark;

}  // namespace

// A trace to continue is read first, read-only, so a damaged one is refused before anything writes to it (opened
// for writing, HDF5 may write to a file it cannot parse, and a file it cannot close stalls the library's exit).
void check_continuable(const std::string& path) {
  h5::Silence silence;
  const auto refuse = [&](const std::string& why) {
    H5Eclear2(H5E_DEFAULT);
    throw InputError("the trace to continue, '" + path + "', cannot be read (" + why +
                     "); move it away (the resumed run then starts a new trace there) or resume into another "
                     "run.output");
  };
  h5::Handle fapl = file_access(path);
  // Closing the file closes whatever a failed open left of its objects.
  h5::check_status(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), path, "H5Pset_fclose_degree");
  std::string plain;
  h5::Handle file = h5::open_read_only(path, fapl.get(), plain);
  if (!file.valid()) refuse("not an HDF5 file: " + (plain.empty() ? std::string("no detail from HDF5") : plain));
  if (!plain.empty()) {  // opened past a killed writer's mark: writing it needs the mark cleared
    h5::Handle probe(h5::check(H5Pcreate(H5P_FILE_ACCESS), path, "H5Pcreate"), H5Pclose);
    if (plain.find("already open for write") != std::string::npos && !clear_killed_writers_mark(probe.get())) {
      H5Eclear2(H5E_DEFAULT);
      throw InputError("the trace to continue, '" + path +
                       "', is still marked open by the killed run that wrote it, and this HDF5 cannot clear the "
                       "mark; clear it with `h5clear -s " +
                       path + "` (package hdf5-tools) and resume again, or move it away");
    }
  }
  for (const char* name : {"events", "steps"}) {
    h5::Handle dset(H5Dopen2(file.get(), name, H5P_DEFAULT), H5Dclose);
    if (!dset.valid()) refuse(std::string("/") + name + ": " + hdf5::innermost_error());
    h5::Handle space(H5Dget_space(dset.get()), H5Sclose);
    if (!space.valid()) refuse(std::string("/") + name + ": " + hdf5::innermost_error());
    // The rows too (open_table reads them all): a damaged chunk index fails only here, not at the open.
    h5::Handle type(H5Dget_type(dset.get()), H5Tclose);
    if (!type.valid()) refuse(std::string("/") + name + ": " + hdf5::innermost_error());
    hsize_t rows = 0;
    if (H5Sget_simple_extent_ndims(space.get()) != 1 || H5Sget_simple_extent_dims(space.get(), &rows, nullptr) < 0)
      refuse(std::string("/") + name + ": not a table of rows");
    std::vector<unsigned char> all(static_cast<size_t>(rows) * H5Tget_size(type.get()));
    if (rows > 0 && H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data()) < 0)
      refuse(std::string("/") + name + " rows: " + hdf5::innermost_error());
  }
}

TraceWriter::TraceWriter(const std::string& path, int first_step) : impl_(std::make_unique<Impl>()) {
  h5::Silence silence;
  check_continuable(path);
  Impl& m = *impl_;
  m.path = path;
  h5::Handle fapl = file_access(path);
  m.file = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  if (!m.file.valid()) {  // left open by a killed run (check_continuable read it with SWMR read)
    H5Eclear2(H5E_DEFAULT);
    if (clear_killed_writers_mark(fapl.get()))
      m.file = h5::Handle(H5Fopen(path.c_str(), H5F_ACC_RDWR, fapl.get()), H5Fclose);
  }
  if (!m.file.valid()) h5::fail_input(path, "H5Fopen");
  hid_t f = m.file.get();
  h5::Handle event_file = h5::event_type(true), step_file = h5::step_type(true);
  h5::Handle event_mem = h5::event_type(false), step_mem = h5::step_type(false);
  m.event_packer = std::make_unique<Packer>(event_mem.get(), event_file.get());
  m.step_packer = std::make_unique<Packer>(step_mem.get(), step_file.get());
  // Rows are appended in this build's layout, so a table of an older layout cannot be continued.
  require_fields(f, path, "steps", step_file.get());
  m.events = open_table(f, path, "events", event_file.get(), *m.event_packer, first_step);
  m.steps = open_table(f, path, "steps", step_file.get(), *m.step_packer, first_step);
  // The dropped rows' space is gone from the extent before any new row is written.
  h5::check_status(H5Fflush(f, H5F_SCOPE_LOCAL), path, "H5Fflush");
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
  if (m.failed) throw Error("trace " + m.path + ": flush after a failed write");
  try {
    write_pending(m);
  } catch (...) {
    m.failed = true;
    throw;
  }
}

void TraceWriter::write_pending(Impl& m) {
  h5::Silence silence;
  // Events reach the disk before the step rows that summarize them (two flushes): a killed run's file
  // never holds a row in /steps whose events are missing from /events.
  if (!m.pending_events.empty()) {
    m.packed.clear();
    m.event_packer->pack_into(m.pending_events.data(), m.pending_events.size(), m.packed);
    m.events.append(m.path, m.zip, m.packed);
    m.pending_events.clear();
  }
  h5::check_status(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), m.path, "H5Fflush");
  if (!m.pending_steps.empty()) {
    m.packed.clear();
    m.step_packer->pack_into(m.pending_steps.data(), m.pending_steps.size(), m.packed);
    m.steps.append(m.path, m.zip, m.packed);
    m.pending_steps.clear();
    h5::check_status(H5Fflush(m.file.get(), H5F_SCOPE_LOCAL), m.path, "H5Fflush");
  }
}

void TraceWriter::close() {
  if (!impl_ || !impl_->file.valid()) return;
  if (impl_->failed) {
    // What the last successful flush wrote is a readable file (SWMR: as after a kill). Closing would flush again:
    // under a file-size limit the superblock, at the file's start, is written with an end of file past the data
    // the failed write never put there, and the whole file no longer opens ("truncated file"). So the handles are
    // left open, unflushed, until the process ends (the commands skip HDF5's teardown at exit).
    impl_->events.dset.release();
    impl_->steps.dset.release();
    impl_->file.release();
    return;
  }
  flush();
  h5::Silence silence;
  Impl& m = *impl_;
  m.events.dset.reset();
  m.steps.dset.reset();
  if (m.file.reset() < 0) h5::fail(m.path, "H5Fclose");
}

const std::string& TraceWriter::path() const {
  if (!impl_) throw Error("TraceWriter::path on a moved-from writer");
  return impl_->path;
}
std::int64_t TraceWriter::events_written() const { return impl_ ? static_cast<std::int64_t>(impl_->events.rows) : 0; }
std::int64_t TraceWriter::steps_written() const { return impl_ ? static_cast<std::int64_t>(impl_->steps.rows) : 0; }

}  // namespace conductor::trace
