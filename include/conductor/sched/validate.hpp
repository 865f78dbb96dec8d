#pragma once
// The schedule validator. Checks, in this order, and reports the FIRST violation with rank, list position
// and reason:
//   1. structure: every action names a chunk < v and a microbatch < m; every (stage, microbatch) has exactly
//      one F and either one B plus one W or one BW, all on the rank that holds the stage;
//   2. same-stage order on a rank: B/BW after its F, W after its B;
//   3. cross-stage order and memory: F(s, mb) after F(s-1, mb) and B(s, mb) after B(s+1, mb) (after F on the
//      last stage) must be satisfiable by the per-rank lists within the memory limit (M_F per rank): the lists
//      run to the end under strict execution (sched::execute, unit op times). A rank stuck on memory is
//      reported first ("memory in use 4 M_F after 0F3 exceeds the limit of 3 M_F"), else a circular wait at the
//      lowest stuck rank with the action it waits for.
// Times (comm included) do not matter for validity: a valid list runs under any positive op and comm times.
#include <functional>
#include <string>

#include "conductor/sched/schedule.hpp"

namespace conductor::sched {

struct Violation {
  bool ok = true;
  int rank = -1;
  int position = -1;            // index in the rank's list
  std::string reason;           // "B 0B3 comes before its F 0F3", ...
  bool memory = false;          // the list stops at an op that would exceed the memory limit
  std::string message() const;  // "rank 2, position 7: ..."
};

// How a report names an action of a rank and a position in its list, for a schedule read from a file that writes
// them otherwise (torch's CSV: stage-indexed actions, positions counted in fields, idle slots included;
// torch_csv.hpp). Empty functions: the text form (to_string(Action)) and the list index. With an action namer, a
// circular wait is reported in its words too.
struct Naming {
  std::function<std::string(int rank, const Action& action)> action;
  std::function<int(int rank, int index)> position;
};

// memory_limit <= 0: not checked. memory_after_b: the fraction a (schedule.hpp).
Violation validate(const Schedule& s, double memory_limit, double memory_after_b, const Naming& naming = {});

// Throws InputError("<what>: rank r, position i: reason") when invalid (MemoryLimitError when memory is why).
void validate_or_throw(const Schedule& s, double memory_limit, double memory_after_b, const std::string& what);

// Peak memory per rank following each list in order (M_F).
std::vector<double> list_peak_memory(const Schedule& s, double memory_after_b);
double list_peak_memory(const Schedule& s, int rank, double memory_after_b);  // one rank's

}  // namespace conductor::sched
