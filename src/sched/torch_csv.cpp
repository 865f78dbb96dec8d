#include "conductor/sched/torch_csv.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "conductor/sched/engine.hpp"
#include "conductor/sched/validate.hpp"
#include "conductor/util/decimal.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"

namespace conductor::sched {

namespace {

// torch's letters for the op kinds. Since torch 2.6: F, I (the backward for the input, conductor's B), W, and B
// for the full backward. torch 2.5 wrote B for the backward (for the input when the schedule splits it: a W of
// the same stage and microbatch follows) and BW for the full backward; such files read too (Letters::Torch25).
enum class Letters { Torch26, Torch25 };

std::string torch_letter(OpKind kind, Letters letters = Letters::Torch26) {
  const bool old = letters == Letters::Torch25;
  switch (kind) {
    case OpKind::F: return "F";
    case OpKind::B: return old ? "B" : "I";
    case OpKind::W: return "W";
    case OpKind::BW: return old ? "BW" : "B";
  }
  return "?";
}

std::string torch_name(const Schedule& s, int rank, const Action& a, Letters letters = Letters::Torch26) {
  return std::to_string(s.stage_of(rank, a.chunk)) + torch_letter(a.kind, letters) + std::to_string(a.microbatch);
}

std::string trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return "";
  return std::string(text.substr(first, text.find_last_not_of(" \t\r") - first + 1));
}

// One compute action as torch writes it, with its stage index still global.
struct CsvAction {
  int stage = 0;
  OpKind kind = OpKind::F;
  int microbatch = 0;    // -1: none (a runtime action such as 0UNSHARD)
  bool runtime = false;  // torch's runtime action: range-checked, then skipped
  std::string letter;    // as written: F, I, W, B or BW (torch 2.5's full backward)
};

// torch's action types that are not computations: its runtime format (`_dump_csv(..., format="compute_comms")`)
// adds them around the compute actions, without reordering those; the compute-only format has none.
bool is_runtime_type(const std::string& type) {
  // SEND_F_RECV_B and SEND_B_RECV_F: torch 2.5's batched pairs.
  static const char* const kTypes[] = {"UNSHARD", "RESHARD", "REDUCE_GRAD",   "SEND_F",       "RECV_F",
                                       "SEND_B",  "RECV_B",  "SEND_F_RECV_B", "SEND_B_RECV_F"};
  return std::any_of(std::begin(kTypes), std::end(kTypes), [&](const char* t) { return type == t; });
}

// A runtime action as a whole field ("1RECV_F0", "0UNSHARD"): skipped when read. conductor derives its transfers
// from the compute order and posts every receive ahead, so torch's placement of them carries nothing it uses.
bool is_runtime_action(const std::string& tok) {
  std::size_t i = 0;
  while (i < tok.size() && std::isdigit(static_cast<unsigned char>(tok[i]))) ++i;
  std::size_t j = i;
  while (j < tok.size() && !std::isdigit(static_cast<unsigned char>(tok[j]))) ++j;
  for (std::size_t k = j; k < tok.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(tok[k]))) return false;
  }
  return i > 0 && is_runtime_type(tok.substr(i, j - i));
}

const char* const kExpected =
    "expected STAGE KIND MICROBATCH with KIND F, I, W or B (such as 2I3), or (A;B)OVERLAP_F_B";

// Numbers are read with append_digit (util/decimal.hpp): past kBeyond a value is only known to be too large.
constexpr long long kBeyond = kDecimalCap;
std::string number(long long value) {
  return value >= kBeyond ? "over " + std::to_string(kBeyond - 1) : std::to_string(value);
}

// Parses "2I3" (in_pair: inside an OVERLAP_F_B pair); "" on success, else why not.
std::string parse_single(const std::string& tok, CsvAction& out, bool in_pair = false) {
  std::size_t i = 0;
  long long stage = 0;
  while (i < tok.size() && std::isdigit(static_cast<unsigned char>(tok[i]))) stage = append_digit(stage, tok[i++]);
  std::size_t j = i;
  while (j < tok.size() && !std::isdigit(static_cast<unsigned char>(tok[j]))) ++j;
  const std::string type = tok.substr(i, j - i);
  if (i == 0 || type.empty()) return "unknown action '" + printable(tok) + "': " + kExpected;
  if (is_runtime_type(type)) {
    if (!in_pair) {
      return "unknown action '" + printable(tok) + "': torch's runtime actions are STAGE TYPE [MICROBATCH] (such as " +
             "1RECV_F0 or 0UNSHARD); compute actions are " + std::string(kExpected).substr(9);
    }
    return "action '" + printable(tok) +
           "' is one of torch's runtime actions (communication, resharding), which an OVERLAP_F_B pair cannot hold: "
           "a pair names two compute actions, F and I, W or B";
  }
  if (type != "BW" && (type.size() != 1 || std::string("FIWB").find(type[0]) == std::string::npos))
    return "unknown action '" + printable(tok) + "': " + kExpected;
  // B is the full backward until the file's letters are known (resolve_letters: torch 2.5's B with a W).
  out.kind = type[0] == 'F' ? OpKind::F : type[0] == 'I' ? OpKind::B : type[0] == 'W' ? OpKind::W : OpKind::BW;
  out.letter = type;
  if (j == tok.size()) return "action '" + printable(tok) + "' has no microbatch: " + kExpected;
  long long mb = 0;
  while (j < tok.size() && std::isdigit(static_cast<unsigned char>(tok[j]))) mb = append_digit(mb, tok[j++]);
  if (j != tok.size()) return "unknown action '" + printable(tok) + "': " + kExpected;
  // Past kBeyond the value is only known to be too large; the caller's range checks name it as such.
  out.stage = static_cast<int>(stage);
  out.microbatch = static_cast<int>(mb);
  return "";
}

// Parses one field: an action, or "(A;B)OVERLAP_F_B" (its actions in order); "" on success, else why not.
std::string parse_field(const std::string& field, std::vector<CsvAction>& out) {
  if (is_runtime_action(field)) {
    // Skipped, but its stage and microbatch must still be the deck's (torch would fail on them when it runs).
    CsvAction a;
    a.runtime = true;
    std::size_t i = 0;
    long long stage = 0, mb = 0;
    while (i < field.size() && std::isdigit(static_cast<unsigned char>(field[i])))
      stage = append_digit(stage, field[i++]);
    while (i < field.size() && !std::isdigit(static_cast<unsigned char>(field[i]))) ++i;
    const bool has_mb = i < field.size();
    while (i < field.size()) mb = append_digit(mb, field[i++]);
    a.stage = static_cast<int>(stage);
    a.microbatch = has_mb ? static_cast<int>(mb) : -1;
    out.push_back(a);
    return "";
  }
  if (field[0] != '(') {
    CsvAction a;
    const std::string why = parse_single(field, a);
    if (why.empty()) out.push_back(a);
    return why;
  }
  const auto close = field.find(')');
  if (close == std::string::npos || field.substr(close + 1) != "OVERLAP_F_B")
    return "unknown action '" + printable(field) + "': " + kExpected;
  std::istringstream inner(field.substr(1, close - 1));
  std::string part;
  int count = 0;
  while (std::getline(inner, part, ';')) {
    CsvAction a;
    if (auto why = parse_single(trim(part), a, true); !why.empty()) return why + " (in '" + printable(field) + "')";
    out.push_back(a);
    ++count;
  }
  // torch's OVERLAP_F_B runs one forward and one backward together: exactly two actions.
  if (count != 2) {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on a chain of std::string operator+ starting here.
    std::string why = "'";
    why += printable(field);
    why += "' names ";
    why += std::to_string(count);
    why += " actions; an OVERLAP_F_B pair names two, (F;B) such as (0F1;1B0)OVERLAP_F_B";
    return why;
  }
  return "";
}

int v_rank(int stage, int p) { return stage < p ? stage : 2 * p - 1 - stage; }

struct Located {
  CsvAction action;
  int rank = 0;
  int field = 0;
};

// The placement the stage indices fit (loop when both do: then they agree); an InputError naming a misplaced
// action of each when they fit neither.
Placement infer_placement(const std::vector<Located>& all, int p, int v, const std::string& source) {
  const Located* loop_bad = nullptr;
  const Located* v_bad = nullptr;
  for (const auto& x : all) {
    if (!loop_bad && x.action.stage % p != x.rank) loop_bad = &x;
    if (!v_bad && (v != 2 || v_rank(x.action.stage, p) != x.rank)) v_bad = &x;
  }
  if (!loop_bad) return Placement::Loop;
  if (!v_bad) return Placement::V;
  auto where = [&](const Located& x, int on) {
    return "rank " + std::to_string(x.rank) + ", position " + std::to_string(x.field) + ": stage " +
           std::to_string(x.action.stage) + " belongs on rank " + std::to_string(on);
  };
  std::string why =
      source + ": the stage indices fit neither loop placement (" + where(*loop_bad, loop_bad->action.stage % p) + ")";
  why += v == 2 ? " nor V placement (" + where(*v_bad, v_rank(v_bad->action.stage, p)) + ")"
                : " nor V placement (it needs parallel.virtual = 2)";
  throw InputError(why);
}

// Which torch's letters the file uses, and its B actions read accordingly. torch 2.5 wrote B for the backward,
// which was for the input alone when the schedule split it (a W of the same stage and microbatch follows), and BW
// for the full backward; torch 2.6 and later write I for the backward for the input and B for the full one, so a
// B and a W of the same stage and microbatch cannot both be there. A file is torch 2.5's when it has a BW or
// (without any I) a B with a W of its stage and microbatch; its Bs with a W then read as backwards for the input
// (a B without one stays the full backward, as torch 2.5 ran it). I and BW in one file mix the two: refused.
Letters resolve_letters(std::vector<Located>& all, const std::string& source) {
  const Located* i_at = nullptr;
  const Located* bw_at = nullptr;
  std::set<std::pair<int, int>> with_w;  // (stage, microbatch) of the Ws
  for (const Located& x : all) {
    if (x.action.letter == "I" && !i_at) i_at = &x;
    if (x.action.letter == "BW" && !bw_at) bw_at = &x;
    if (x.action.kind == OpKind::W) with_w.emplace(x.action.stage, x.action.microbatch);
  }
  auto split = [&](const Located& x) {
    return x.action.letter == "B" && with_w.count({x.action.stage, x.action.microbatch}) > 0;
  };
  if (i_at && bw_at) {
    throw InputError(source + ": rank " + std::to_string(bw_at->rank) + ", position " + std::to_string(bw_at->field) +
                     ": BW is torch 2.5's full backward, but the file also has I (rank " + std::to_string(i_at->rank) +
                     ", position " + std::to_string(i_at->field) +
                     "), torch 2.6's backward for the input, whose full backward is B: one file uses one version's "
                     "letters");
  }
  const bool torch25 = bw_at || (!i_at && std::any_of(all.begin(), all.end(), split));
  if (!torch25) return Letters::Torch26;
  for (Located& x : all) {
    if (split(x)) x.action.kind = OpKind::B;
  }
  return Letters::Torch25;
}

}  // namespace

void write_torch_csv(std::ostream& out, const Schedule& s) {
  ExecOptions eo;
  eo.execution = Execution::Strict;
  const ExecResult run = execute(
      s, eo, [](int, const Action&) { return 1.0; }, [](const Transfer&) { return 0.0; });
  // Per rank, each op's slot and list position; the rows are written one at a time (a grid of p rows of about
  // 2 m v + p fields held as strings took 14 GB at p = 16384).
  std::vector<std::vector<std::pair<std::size_t, int>>> slots(static_cast<std::size_t>(s.p));
  for (const OpTiming& op : run.ops) {
    slots[static_cast<std::size_t>(op.rank)].emplace_back(static_cast<std::size_t>(std::llround(op.start - run.start)),
                                                          op.index);
  }
  // The file's size first: a file the reader refuses (kMaxScheduleFileBytes; at p = 65536 the slots' commas alone
  // take 6.4 GB) is refused before a byte is written.
  std::uintmax_t bytes = 0;
  for (int r = 0; r < s.p; ++r) {
    auto& at = slots[static_cast<std::size_t>(r)];
    std::sort(at.begin(), at.end());
    bytes += (at.empty() ? 0 : at.back().first) + 1;
    for (const auto& [slot, index] : at)
      bytes += torch_name(s, r, s.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(index)]).size();
  }
  if (bytes > kMaxScheduleFileBytes) {
    throw InputError("the CSV of schedule '" + s.name + "' (p = " + std::to_string(s.p) +
                     ", m = " + std::to_string(s.m) + ", v = " + std::to_string(s.v) + ") would take " +
                     std::to_string(bytes) + " bytes, over the " + std::to_string(kMaxScheduleFileBytes) +
                     " a schedule file may hold (it could not be read back); use --format text, whose size grows "
                     "with the ops alone, or a smaller pipeline");
  }
  std::string row;
  for (int r = 0; r < s.p; ++r) {
    auto& at = slots[static_cast<std::size_t>(r)];
    row.clear();
    std::size_t commas = 0;  // a field in slot k follows k commas
    for (const auto& [slot, index] : at) {
      row.append(slot - commas, ',');
      commas = slot;
      row += torch_name(s, r, s.ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(index)]);
    }
    row += '\n';
    out << row;
  }
}

std::string to_torch_csv(const Schedule& s) {
  std::ostringstream out;
  write_torch_csv(out, s);
  return out.str();
}

Schedule parse_torch_csv(const std::string& text, const std::string& source, const ScheduleShape& shape,
                         CsvReading* reading) {
  // Lines and fields are views of the text (std::getline's splits: no empty line after a last line end, none
  // after a last comma): a file up to the reader's 1 GiB is held once.
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    lines.push_back(std::string_view(text).substr(at, end - at));
    at = end + 1;
  }
  while (!lines.empty() && trim(lines.back()).empty()) lines.pop_back();
  if (static_cast<int>(lines.size()) != shape.p) {
    // What the count holds that a rank line cannot: blank lines, and conductor's text form saved as .csv.
    const auto blank = std::count_if(lines.begin(), lines.end(), [](std::string_view l) { return trim(l).empty(); });
    const auto text_form = std::any_of(lines.begin(), lines.end(), [](std::string_view l) {
      const std::string t = trim(l);
      return !t.empty() && (t.rfind("pipeline ", 0) == 0 || t.rfind("rank ", 0) == 0);
    });
    // A '#' line in a CSV that is otherwise one: a comment torch's format has no room for (every line is a rank).
    const auto comment = std::find_if(lines.begin(), lines.end(), [](std::string_view l) {
      const std::string t = trim(l);
      return !t.empty() && t[0] == '#';
    });
    std::string why = source + ": " + std::to_string(lines.size()) + " rank lines";
    if (blank > 0) why += " (" + std::to_string(blank) + " of them blank)";
    why += " but parallel.pipeline = " + std::to_string(shape.p) + " (torch's CSV holds one line per rank)";
    if (comment != lines.end() && !text_form) {
      why += "; line " + std::to_string(comment - lines.begin() + 1) +
             " is a '#' comment, which torch's CSV has no room for: remove it";
    } else if (text_form || comment != lines.end()) {
      why +=
          "; it reads like conductor's text form (`conductor schedule` prints it without --format csv): name "
          "the file other than .csv, or export it with --format csv";
    }
    throw InputError(why);
  }
  const int stages = shape.p * shape.v;
  // A rank holds at most an F, a B (or I) and a W of each of its v x m (chunk, microbatch): a file with more is
  // refused at the first action past that, before it is held (a duplicated line of 20 million actions took 28
  // times its size in memory to be refused as a duplicate).
  const long long most = 3LL * shape.v * shape.m;
  std::vector<Located> all;
  for (int r = 0; r < shape.p; ++r) {
    const std::string_view line = lines[static_cast<std::size_t>(r)];
    long long held = 0;
    int f = 0;
    for (std::size_t at = 0; at < line.size(); ++f) {
      const std::size_t end = std::min(line.find(',', at), line.size());
      std::string field = trim(line.substr(at, end - at));
      at = end + 1;
      // A quoted field's own spaces go too, as torch's _Action.from_str strips them.
      if (field.size() >= 2 && field.front() == '"' && field.back() == '"')
        field = trim(field.substr(1, field.size() - 2));
      if (field.empty()) continue;
      auto fail = [&](const std::string& why) {
        throw InputError(source + ": rank " + std::to_string(r) + ", position " + std::to_string(f) + ": " + why);
      };
      std::vector<CsvAction> parsed;
      if (auto why = parse_field(field, parsed); !why.empty()) fail(why);
      for (const auto& a : parsed) {
        if (a.stage >= stages) {
          fail("action '" + field + "' names stage " + number(a.stage) + " but the deck has " + std::to_string(stages) +
               " stages (parallel.pipeline x parallel.virtual = " + std::to_string(shape.p) + " x " +
               std::to_string(shape.v) + ")");
        }
        if (a.microbatch >= shape.m) {
          fail("action '" + field + "' names microbatch " + number(a.microbatch) +
               " but parallel.microbatches = " + std::to_string(shape.m));
        }
        if (a.runtime) continue;
        if (++held > most) {
          fail("action '" + field + "' is the rank's action number " + std::to_string(held) + ", past the " +
               std::to_string(most) + " a rank holds (an F, a B or I and a W of each of its parallel.virtual x " +
               "parallel.microbatches = " + std::to_string(shape.v) + " x " + std::to_string(shape.m) +
               " chunks and microbatches): an action given twice, or a schedule for more microbatches");
        }
        all.push_back({a, r, f});
      }
    }
  }
  const Letters letters = resolve_letters(all, source);
  Schedule s;
  s.p = shape.p;
  s.m = shape.m;
  s.v = shape.v;
  s.name = source;
  s.placement = shape.placement ? *shape.placement : infer_placement(all, shape.p, shape.v, source);
  s.ranks.resize(static_cast<std::size_t>(s.p));
  if (reading) {
    reading->field_of.assign(static_cast<std::size_t>(s.p), {});
    reading->torch25_letters = letters == Letters::Torch25;
  }
  for (const auto& x : all) {
    if (s.rank_of(x.action.stage) != x.rank) {
      throw InputError(source + ": rank " + std::to_string(x.rank) + ", position " + std::to_string(x.field) +
                       ": stage " + std::to_string(x.action.stage) + " is on rank " +
                       std::to_string(s.rank_of(x.action.stage)) + " under " + to_string(s.placement) + " placement");
    }
    s.ranks[x.rank].push_back(Action{x.action.kind, x.action.microbatch, s.chunk_of(x.action.stage)});
    if (reading) reading->field_of[static_cast<std::size_t>(x.rank)].push_back(x.field);
  }
  return s;
}

bool is_torch_csv(const std::string& path, const std::string& text) {
  std::string ext = path.size() >= 4 ? path.substr(path.size() - 4) : "";
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext == ".csv") return true;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    line = trim(line);
    if (line.empty()) continue;
    // The text form starts with a comment or a key word; a CSV line with an action (quoted, too) or an idle slot.
    return line[0] == ',' || line[0] == '(' || line[0] == '"' || std::isdigit(static_cast<unsigned char>(line[0]));
  }
  return false;
}

Schedule import_schedule(const std::string& path, const ScheduleShape& shape, double memory_limit, double a) {
  const std::string text = read_schedule_file(path);
  Schedule s;
  Naming naming;
  CsvReading reading;
  if (is_torch_csv(path, text)) {
    s = parse_torch_csv(text, path, shape, &reading);
    const Letters letters = reading.torch25_letters ? Letters::Torch25 : Letters::Torch26;
    naming.action = [&s, letters](int rank, const Action& x) { return torch_name(s, rank, x, letters); };
    naming.position = [&reading](int rank, int index) { return reading.field_of[rank][index]; };
  } else {
    // The deck's shape before the file's own completeness: a file for another pipeline otherwise reads as one
    // missing a rank line.
    s = parse_text(text, path, [&](const Schedule& read) {
      if (read.p != shape.p || read.m != shape.m || read.v != shape.v) {
        throw InputError(path + ": the schedule is for pipeline " + std::to_string(read.p) + ", microbatches " +
                         std::to_string(read.m) + ", virtual " + std::to_string(read.v) + " but the deck has " +
                         std::to_string(shape.p) + ", " + std::to_string(shape.m) + ", " + std::to_string(shape.v));
      }
      if (shape.placement && *shape.placement != read.placement) {
        throw InputError(path + ": the schedule has placement " + to_string(read.placement) +
                         " but the deck's schedule.placement is " + to_string(*shape.placement));
      }
    });
  }
  const Violation why = validate(s, memory_limit, a, naming);
  if (!why.ok) throw InputError(path + ": invalid schedule: " + why.message());
  s.name = "file:" + path;
  return s;
}

}  // namespace conductor::sched
