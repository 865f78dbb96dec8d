#include "h5schema.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "conductor/trace/event.hpp"

namespace conductor::trace::h5 {

namespace {

struct Member {
  const char* name;
  std::size_t mem_offset;
  hid_t mem_type;   // native type (not owned)
  hid_t file_type;  // standard LE type (not owned), or -1 for the kind enum
  const char* unit;
  const char* description;
};

// Types are built once per call; a failure here is a programming error (no file involved).
void ok(herr_t status) {
  if (status < 0) throw std::logic_error("trace: building an HDF5 type failed: " + last_error());
}

Handle build_compound(const std::vector<Member>& members, std::size_t mem_size, bool file) {
  std::size_t size = mem_size;
  if (file) {
    size = 0;
    for (const Member& m : members) size += m.file_type >= 0 ? H5Tget_size(m.file_type) : 1;
  }
  Handle type(H5Tcreate(H5T_COMPOUND, size), H5Tclose);
  if (!type.valid()) throw std::logic_error("trace: H5Tcreate(compound) failed: " + last_error());
  std::size_t offset = 0;
  for (const Member& m : members) {
    hid_t t = file ? m.file_type : m.mem_type;
    Handle kind;
    if (t < 0) {  // the kind enum
      kind = kind_type(file);
      t = kind.get();
    }
    ok(H5Tinsert(type.get(), m.name, file ? offset : m.mem_offset, t));
    offset += H5Tget_size(t);
  }
  return type;
}

}  // namespace

Handle kind_type(bool file) {
  Handle type(H5Tenum_create(file ? H5T_STD_I8LE : H5T_NATIVE_SCHAR), H5Tclose);
  if (!type.valid()) throw std::logic_error("trace: H5Tenum_create failed: " + last_error());
  for (EventKind k :
       {EventKind::F, EventKind::B, EventKind::W, EventKind::BW, EventKind::SEND, EventKind::RECV, EventKind::ANNOUNCE,
        EventKind::HELP_F, EventKind::HELP_B, EventKind::HELP_W, EventKind::HELP_BW}) {
    std::int8_t value = static_cast<std::int8_t>(k);
    ok(H5Tenum_insert(type.get(), to_string(k), &value));
  }
  return type;
}

namespace {

// The fields of /events and /steps with their units and meanings: docs/trace.md's tables, also written into the
// file as dataset attributes (see write_field_docs in trace_writer.cpp).
std::vector<Member> event_members() {
  return {
      {"step", offsetof(OpEvent, step), H5T_NATIVE_INT32, H5T_STD_I32LE, "", "training step (0-based)"},
      {"rank", offsetof(OpEvent, rank), H5T_NATIVE_INT32, H5T_STD_I32LE, "", "the rank that executed the op"},
      {"stage", offsetof(OpEvent, stage), H5T_NATIVE_INT32, H5T_STD_I32LE, "", "virtual stage index"},
      {"chunk", offsetof(OpEvent, chunk), H5T_NATIVE_INT32, H5T_STD_I32LE, "", "virtual chunk on this rank"},
      {"microbatch", offsetof(OpEvent, microbatch), H5T_NATIVE_INT32, H5T_STD_I32LE, "",
       "microbatch index within the step"},
      {"kind", offsetof(OpEvent, kind), -1, -1, "",
       "F, B, W, BW (compute), SEND, RECV, ANNOUNCE, HELP_F/B/W/BW (slices computed for peer)"},
      {"ready_ns", offsetof(OpEvent, ready_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "compute: inputs arrived and memory fits; transfer: posted; ANNOUNCE: the announced arrival"},
      {"start_ns", offsetof(OpEvent, start_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "compute: began; transfer: posted; ANNOUNCE: the producing op began"},
      {"end_ns", offsetof(OpEvent, end_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "compute: finished; SEND: completed; RECV: data arrived; ANNOUNCE: received"},
      {"bytes", offsetof(OpEvent, bytes), H5T_NATIVE_INT64, H5T_STD_I64LE, "B",
       "transfer: bytes moved; compute: activation/gradient bytes held"},
      {"wait_ns", offsetof(OpEvent, wait_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "idle time on this rank right before this op started"},
      {"peer", offsetof(OpEvent, peer), H5T_NATIVE_INT32, H5T_STD_I32LE, "",
       "the other rank of a transfer; -1 for compute"},
      {"migrated", offsetof(OpEvent, migrated), H5T_NATIVE_INT16, H5T_STD_I16LE, "",
       "slices computed on another rank than the op's owner (owner's op: sent away; HELP_*: computed here)"},
  };
}

std::vector<Member> step_members() {
  return {
      {"step", offsetof(StepRecord, step), H5T_NATIVE_INT32, H5T_STD_I32LE, "", "step index"},
      {"loss", offsetof(StepRecord, loss), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "",
       "mean training loss of the step; NaN where no loss exists"},
      {"start_ns", offsetof(StepRecord, start_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "first compute-op start of the step, over all ranks"},
      {"makespan_ns", offsetof(StepRecord, makespan_ns), H5T_NATIVE_INT64, H5T_STD_I64LE, "ns",
       "last compute-op end - first compute-op start, over all ranks"},
      {"bubble_ratio", offsetof(StepRecord, bubble_ratio), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "1",
       "1 - (sum over ranks of compute busy time) / (world_size x makespan)"},
      {"samples_per_s", offsetof(StepRecord, samples_per_s), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "samples/s",
       "samples of the step / makespan"},
      {"lower_bound_ns", offsetof(StepRecord, lower_bound_ns), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "ns",
       "largest per-rank busy time"},
      {"stage_bubble_ratio", offsetof(StepRecord, stage_bubble_ratio), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, "1",
       "mean over ranks with a compute op of 1 - busy / span (the Zero Bubble paper's per-stage bubble)"},
  };
}

std::vector<FieldDoc> docs_of(const std::vector<Member>& members) {
  std::vector<FieldDoc> out;
  for (const Member& m : members) out.push_back({m.name, m.unit, m.description});
  return out;
}

}  // namespace

Handle event_type(bool file) { return build_compound(event_members(), sizeof(OpEvent), file); }
Handle step_type(bool file) { return build_compound(step_members(), sizeof(StepRecord), file); }
std::vector<FieldDoc> event_field_docs() { return docs_of(event_members()); }
std::vector<FieldDoc> step_field_docs() { return docs_of(step_members()); }

Handle vlen_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.valid()) throw std::logic_error("trace: H5Tcopy(H5T_C_S1) failed: " + last_error());
  ok(H5Tset_size(type.get(), H5T_VARIABLE));
  ok(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  return type;
}

}  // namespace conductor::trace::h5
