#pragma once
// torch.distributed.pipelining's schedule CSV (its "compute_only" format), in and out, and the one entry point
// that reads a schedule file of either form (schedule.kind: file:PATH).
//
// The CSV: one line per rank, one field per time slot; a field is an action STAGE KIND MICROBATCH with STAGE the
// global (virtual) stage index and KIND one of
//   F  forward                      (conductor F)
//   I  backward for the input       (conductor B)
//   W  backward for the weights     (conductor W)
//   B  full backward                (conductor BW)
// e.g. `0F0`, `2I3`, `1W0`, `3B1`; an empty field is an idle slot. `(0F7;7B3)OVERLAP_F_B` is a forward and a
// backward torch overlaps as a pair: conductor runs them back to back, in the written order. Which rank holds a
// stage follows the placement: loop (stage % p) or V (stage s < p on rank s, stage s >= p on rank 2p-1-s), the
// same two mappings as schedule.hpp.
#include <optional>
#include <ostream>
#include <string>

#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

// What the deck says a schedule file must be: p ranks, m microbatches, v chunks per rank, and the placement when
// the deck states one (nullopt: the file's own, or for a CSV inferred from its stage indices).
struct ScheduleShape {
  int p = 1;
  int m = 1;
  int v = 1;
  std::optional<Placement> placement;
};

// The CSV of a schedule. Each action goes in the slot where it starts when the lists run in order with unit op
// times and instant transfers (the lock-step time grid torch's own schedules print), so dependencies show as
// empty fields; trailing empty fields are left out.
std::string to_torch_csv(const Schedule& s);
// The same, written row by row to `out` (what `conductor schedule --format csv` prints).
void write_torch_csv(std::ostream& out, const Schedule& s);

// Parses torch's CSV against the deck's shape. Structure only (the rank count, each field, stage to rank under
// the placement): import_schedule() also validates. Throws InputError "source: rank R, position P: reason" with P
// the 0-based field (column) of the line, empty fields counted. `reading`, when given, receives for each rank
// the field of each action in the returned list (both actions of an OVERLAP_F_B pair share their field), and
// whether the file has torch 2.5's letters (B for the backward, split when a W follows; BW the full backward).
struct CsvReading {
  std::vector<std::vector<int>> field_of;
  bool torch25_letters = false;
};
Schedule parse_torch_csv(const std::string& text, const std::string& source, const ScheduleShape& shape,
                         CsvReading* reading = nullptr);

// True when `path` names a CSV: a .csv extension, or text whose first non-blank line is not a line of the text
// form (no '#' comment or key word) and holds a ',' or an action with a torch kind.
bool is_torch_csv(const std::string& path, const std::string& text);

// Reads a schedule file of either form, checks it against the deck's shape and validates it (validate.hpp) at
// `memory_limit` (<= 0: not checked). Every problem is one InputError naming the file, the rank, the position
// (the CSV's field, or the text form's list index) and the reason; actions of a CSV are named as torch writes them.
Schedule import_schedule(const std::string& path, const ScheduleShape& shape, double memory_limit,
                         double memory_after_b);

}  // namespace conductor::sched
