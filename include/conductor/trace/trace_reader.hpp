#pragma once
// Reads a trace written by TraceWriter back into memory (tests, tools). Validates the schema: a missing
// dataset, field or attribute, or a newer schema_version, throws conductor::InputError naming it.
// A trace left by a killed run opens too (see docs/trace.md, "Durability").
#include <string>
#include <vector>

#include "conductor/trace/event.hpp"

namespace conductor::trace {

struct Trace {
  int schema_version = 0;
  RunInfo info;  // info.clock is "" and info.epoch_unix_ns empty for a trace written before they were recorded
  std::vector<OpEvent> events;
  std::vector<StepRecord> steps;
};

Trace read_trace(const std::string& path);

// The steps /steps holds rows for, in file order (fill rows of a killed run dropped), without reading /events:
// what a resumed run's checks compare with its checkpoint. Throws InputError as read_trace does.
std::vector<int> read_step_numbers(const std::string& path);

}  // namespace conductor::trace
