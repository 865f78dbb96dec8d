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
  for (EventKind k : {EventKind::F, EventKind::B, EventKind::W, EventKind::BW, EventKind::SEND, EventKind::RECV,
                      EventKind::ANNOUNCE}) {
    std::int8_t value = static_cast<std::int8_t>(k);
    ok(H5Tenum_insert(type.get(), to_string(k), &value));
  }
  return type;
}

Handle event_type(bool file) {
  std::vector<Member> members = {
      {"step", offsetof(OpEvent, step), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"rank", offsetof(OpEvent, rank), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"stage", offsetof(OpEvent, stage), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"chunk", offsetof(OpEvent, chunk), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"microbatch", offsetof(OpEvent, microbatch), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"kind", offsetof(OpEvent, kind), -1, -1},
      {"ready_ns", offsetof(OpEvent, ready_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"start_ns", offsetof(OpEvent, start_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"end_ns", offsetof(OpEvent, end_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"bytes", offsetof(OpEvent, bytes), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"wait_ns", offsetof(OpEvent, wait_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"peer", offsetof(OpEvent, peer), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"migrated", offsetof(OpEvent, migrated), H5T_NATIVE_INT8, H5T_STD_I8LE},
  };
  return build_compound(members, sizeof(OpEvent), file);
}

Handle step_type(bool file) {
  std::vector<Member> members = {
      {"step", offsetof(StepRecord, step), H5T_NATIVE_INT32, H5T_STD_I32LE},
      {"loss", offsetof(StepRecord, loss), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE},
      {"start_ns", offsetof(StepRecord, start_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"makespan_ns", offsetof(StepRecord, makespan_ns), H5T_NATIVE_INT64, H5T_STD_I64LE},
      {"bubble_ratio", offsetof(StepRecord, bubble_ratio), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE},
      {"samples_per_s", offsetof(StepRecord, samples_per_s), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE},
      {"lower_bound_ns", offsetof(StepRecord, lower_bound_ns), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE},
      {"stage_bubble_ratio", offsetof(StepRecord, stage_bubble_ratio), H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE},
  };
  return build_compound(members, sizeof(StepRecord), file);
}

Handle vlen_string_type() {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (!type.valid()) throw std::logic_error("trace: H5Tcopy(H5T_C_S1) failed: " + last_error());
  ok(H5Tset_size(type.get(), H5T_VARIABLE));
  ok(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  return type;
}

}  // namespace conductor::trace::h5
