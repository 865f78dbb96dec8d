#pragma once
// Private to the trace layer: the HDF5 types of /events and /steps (docs/trace.md). The file types are
// packed little-endian; the memory types mirror OpEvent / StepRecord, and HDF5 converts between them by
// field name, so the reader also reads files whose fields are stored in another order or width.
#include <array>
#include <string_view>
#include <vector>

#include "h5util.hpp"

namespace conductor::trace::h5 {

inline constexpr std::array<std::string_view, 13> kEventFields = {
    "step",     "rank",   "stage", "chunk",   "microbatch", "kind",    "ready_ns",
    "start_ns", "end_ns", "bytes", "wait_ns", "peer",       "migrated"};
inline constexpr std::array<std::string_view, 7> kStepFields = {
    "step", "loss", "start_ns", "makespan_ns", "bubble_ratio", "samples_per_s", "lower_bound_ns"};
// Added after schema 1 was published: a trace without it is still read (the reader computes it from /events).
inline constexpr std::string_view kStageBubbleField = "stage_bubble_ratio";
inline constexpr std::array<std::string_view, 13> kRootAttributes = {
    "schema_version", "deck",      "world_size",   "schedule", "execution",    "hint",   "backend",
    "source",         "hostnames", "git_revision", "pipeline", "microbatches", "virtual"};

// A field's unit ("" when it has none, "1" for a ratio) and meaning, written as dataset attributes.
struct FieldDoc {
  std::string_view name, unit, description;
};

Handle kind_type(bool file);   // HDF5 enum over int8: F=0 B=1 W=2 BW=3 SEND=4 RECV=5
Handle event_type(bool file);  // compound matching OpEvent (memory) or its packed LE form (file)
Handle step_type(bool file);   // compound matching StepRecord (memory) or its packed LE form (file)
Handle vlen_string_type();
std::vector<FieldDoc> event_field_docs();  // in the field order of event_type
std::vector<FieldDoc> step_field_docs();   // variable-length UTF-8 string

}  // namespace conductor::trace::h5
