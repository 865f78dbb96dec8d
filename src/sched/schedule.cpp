#include "conductor/sched/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "conductor/util/decimal.hpp"
#include "conductor/util/error.hpp"
#include "conductor/util/format.hpp"
#include "conductor/util/text_file.hpp"

namespace conductor::sched {

const char* to_string(OpKind kind) {
  switch (kind) {
    case OpKind::F: return "F";
    case OpKind::B: return "B";
    case OpKind::W: return "W";
    case OpKind::BW: return "BW";
  }
  return "?";
}

const char* to_string(Placement placement) { return placement == Placement::V ? "v" : "loop"; }

std::string to_string(const Action& a) {
  return std::to_string(a.chunk) + to_string(a.kind) + std::to_string(a.microbatch);
}

int Schedule::stage_of(int rank, int chunk) const {
  if (placement == Placement::V) return chunk == 0 ? rank : 2 * p - 1 - rank;
  return chunk * p + rank;
}

int Schedule::rank_of(int stage) const {
  if (placement == Placement::V) return stage < p ? stage : 2 * p - 1 - stage;
  return stage % p;
}

int Schedule::chunk_of(int stage) const {
  if (placement == Placement::V) return stage < p ? 0 : 1;
  return stage / p;
}

std::size_t Schedule::num_actions() const {
  std::size_t n = 0;
  for (const auto& r : ranks) n += r.size();
  return n;
}

namespace {
Transfer make_transfer(const Schedule& s, Payload payload, int mb, int from_stage, int to_stage) {
  Transfer t;
  t.payload = payload;
  t.microbatch = mb;
  t.from_stage = from_stage;
  t.from_rank = s.rank_of(from_stage);
  t.from_chunk = s.chunk_of(from_stage);
  t.to_stage = to_stage;
  t.to_rank = s.rank_of(to_stage);
  t.to_chunk = s.chunk_of(to_stage);
  return t;
}
}  // namespace

std::optional<Transfer> input_of(const Schedule& s, int rank, const Action& a) {
  const int stage = s.stage_of(rank, a.chunk);
  if (a.kind == OpKind::F) {
    if (stage == 0) return std::nullopt;
    return make_transfer(s, Payload::Activation, a.microbatch, stage - 1, stage);
  }
  if (a.kind == OpKind::B || a.kind == OpKind::BW) {
    if (stage == s.num_stages() - 1) return std::nullopt;
    return make_transfer(s, Payload::Gradient, a.microbatch, stage + 1, stage);
  }
  return std::nullopt;
}

std::optional<Transfer> output_of(const Schedule& s, int rank, const Action& a) {
  const int stage = s.stage_of(rank, a.chunk);
  if (a.kind == OpKind::F) {
    if (stage == s.num_stages() - 1) return std::nullopt;
    return make_transfer(s, Payload::Activation, a.microbatch, stage, stage + 1);
  }
  if (a.kind == OpKind::B || a.kind == OpKind::BW) {
    if (stage == 0) return std::nullopt;
    return make_transfer(s, Payload::Gradient, a.microbatch, stage, stage - 1);
  }
  return std::nullopt;
}

double memory_delta(OpKind kind, int v, double a) {
  const double unit = 1.0 / v;
  switch (kind) {
    case OpKind::F: return unit;
    case OpKind::B: return -(1.0 - a) * unit;
    case OpKind::W: return -a * unit;
    case OpKind::BW: return -unit;
  }
  return 0.0;
}

std::string to_text(const Schedule& s) {
  std::ostringstream out;
  out << "# conductor schedule";
  if (!s.name.empty()) out << " (" << s.name << ")";
  out << "\npipeline " << s.p << "\nmicrobatches " << s.m << "\nvirtual " << s.v << "\nplacement "
      << to_string(s.placement) << "\n";
  for (std::size_t r = 0; r < s.ranks.size(); ++r) {
    out << "rank " << r << ":";
    for (const auto& a : s.ranks[r]) out << ' ' << to_string(a);
    out << "\n";
  }
  return out.str();
}

namespace {

// Parses "0F3", "1BW12" into an action; "" on success, else why not.
std::string parse_action(const std::string& tok, Action& a) {
  std::size_t i = 0;
  bool too_large = false;
  auto number = [&](int& out) {
    const std::size_t begin = i;
    long long v = 0;
    for (; i < tok.size() && std::isdigit(static_cast<unsigned char>(tok[i])); ++i) {
      v = append_digit(v, tok[i]);  // read on: the whole token is checked
    }
    too_large |= v >= kDecimalCap;
    out = static_cast<int>(v);
    return i > begin;
  };
  const auto large = [&] {
    // Appended piece by piece: GCC 12's -Wrestrict misfires on a chain of std::string operator+ starting here.
    std::string why = "'";
    why += printable(tok);
    why += "' holds a number of 2^30 or more: a chunk must be below parallel.virtual and a microbatch below ";
    why += "parallel.microbatches";
    return why;
  };
  if (!number(a.chunk)) return "expected CHUNK KIND MICROBATCH such as 0F3 or 1BW7";
  if (too_large) return large();
  if (tok.compare(i, 2, "BW") == 0) {
    a.kind = OpKind::BW;
    i += 2;
  } else if (i < tok.size() && (tok[i] == 'F' || tok[i] == 'B' || tok[i] == 'W')) {
    a.kind = tok[i] == 'F' ? OpKind::F : tok[i] == 'B' ? OpKind::B : OpKind::W;
    ++i;
  } else {
    return "the kind must be F, B, W or BW";
  }
  if (!number(a.microbatch) || i != tok.size()) return "expected CHUNK KIND MICROBATCH such as 0F3 or 1BW7";
  return too_large ? large() : "";
}

}  // namespace

Schedule parse_text(const std::string& text, const std::string& source) { return parse_text(text, source, {}); }

Schedule parse_text(const std::string& text, const std::string& source,
                    const std::function<void(const Schedule&)>& check) {
  Schedule s;
  s.name = source;
  bool have_p = false, have_m = false;
  std::vector<bool> seen_rank;
  int current = -1;
  std::istringstream in(text);
  std::string line;
  int lineno = 0;
  auto fail = [&](const std::string& why) { throw InputError(source + ":" + std::to_string(lineno) + ": " + why); };
  std::vector<std::string> given;  // header keys seen: each once, like a deck's keys
  auto positive = [&](const std::string& key, std::istringstream& ls, int& out, int hi) {
    long long v = 0;
    if (!(ls >> v) || v < 1 || v > hi) fail(key + " needs an integer in 1 .. " + std::to_string(hi));
    out = static_cast<int>(v);
  };
  while (std::getline(in, line)) {
    ++lineno;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ls(line);
    std::string word;
    if (!(ls >> word)) continue;
    if (word == "pipeline" || word == "microbatches" || word == "virtual" || word == "placement") {
      if (std::find(given.begin(), given.end(), word) != given.end()) fail("'" + word + "' is given twice");
      given.push_back(word);
    }
    if (word == "pipeline") {
      positive(word, ls, s.p, 65536);
      have_p = true;
      current = -1;
    } else if (word == "microbatches") {
      positive(word, ls, s.m, 1 << 20);
      have_m = true;
      current = -1;
    } else if (word == "virtual") {
      positive(word, ls, s.v, 64);
      current = -1;
    } else if (word == "placement") {
      std::string p;
      ls >> p;
      if (p == "loop")
        s.placement = Placement::Loop;
      else if (p == "v")
        s.placement = Placement::V;
      else
        fail("placement must be 'loop' or 'v', got '" + printable(p) + "'");
      current = -1;
    } else if (word == "rank") {
      if (!have_p || !have_m) fail("'pipeline' and 'microbatches' must come before the first 'rank' line");
      if (s.ranks.empty()) {
        s.ranks.resize(s.p);
        seen_rank.assign(s.p, false);
      }
      std::string id;
      ls >> id;
      if (id.empty() || id.back() != ':') fail("expected 'rank R:'");
      id.pop_back();
      char* end = nullptr;
      const long r = std::strtol(id.c_str(), &end, 10);
      if (id.empty() || *end != '\0' || r < 0 || r >= s.p) {
        fail("rank '" + printable(id) + "' is not in 0 .. " + std::to_string(s.p - 1));
      }
      if (seen_rank[r]) fail("rank " + id + " is listed twice");
      seen_rank[r] = true;
      current = static_cast<int>(r);
    } else {
      if (current < 0)
        fail("unknown key '" + printable(word) + "' (expected pipeline, microbatches, virtual, placement, rank)");
      ls.clear();
      ls.str(line);
    }
    if (current >= 0) {
      std::string tok;
      while (ls >> tok) {
        Action a;
        if (auto why = parse_action(tok, a); !why.empty()) fail("action '" + printable(tok) + "': " + why);
        if (a.chunk >= s.v)
          fail("action '" + printable(tok) + "': chunk " + std::to_string(a.chunk) +
               " but virtual = " + std::to_string(s.v));
        if (a.microbatch >= s.m) {
          fail("action '" + printable(tok) + "': microbatch " + std::to_string(a.microbatch) +
               " but microbatches = " + std::to_string(s.m));
        }
        // At most an F, a B and a W of each (chunk, microbatch): refused at the first action past that, before
        // a file of repeated actions is held whole (as the CSV reader does).
        if (s.ranks[current].size() >= 3ULL * static_cast<unsigned>(s.v) * static_cast<unsigned>(s.m)) {
          fail("action '" + printable(tok) + "' is rank " + std::to_string(current) + "'s action number " +
               std::to_string(s.ranks[current].size() + 1) +
               ", past the 3 x virtual x microbatches = " + std::to_string(3LL * s.v * s.m) +
               " a rank holds: an action given twice, or a schedule for more "
               "microbatches");
        }
        s.ranks[current].push_back(a);
      }
    }
  }
  if (!have_p || !have_m) throw InputError(source + ": a schedule needs 'pipeline' and 'microbatches' lines");
  if (s.placement == Placement::V && s.v != 2) throw InputError(source + ": placement v needs virtual 2");
  if (s.ranks.empty()) s.ranks.resize(s.p);
  if (check) check(s);
  for (int r = 0; r < s.p; ++r) {
    if (!seen_rank.empty() && !seen_rank[r]) {
      // Named with the header that asks for it: a header for another pipeline reads as a missing rank otherwise.
      throw InputError(source + ": no 'rank " + std::to_string(r) + ":' line (its 'pipeline " + std::to_string(s.p) +
                       "' line asks for ranks 0 .. " + std::to_string(s.p - 1) + ")");
    }
  }
  return s;
}

namespace {

// A schedule file's text with its line ends as '\n' (CR LF and a lone CR alike) and no UTF-8 byte order mark.
std::string schedule_file_text(std::string text) {
  if (text.rfind("\xEF\xBB\xBF", 0) == 0) text.erase(0, 3);  // a UTF-8 byte order mark (spreadsheets write one)
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\r') {
      out += text[i];
    } else if (i + 1 >= text.size() || text[i + 1] != '\n') {
      out += '\n';  // a lone CR ends a line (old Mac files); CR LF is one line end
    }
  }
  return out;
}

}  // namespace

std::string read_schedule_file(const std::string& path) {
  std::string text = read_text_input(path, "schedule file", kMaxScheduleFileBytes);
  // UTF-16 (what Windows PowerShell's `>` writes): every other byte 0, read as garbled lines otherwise.
  const bool bom16 =
      text.size() >= 2 && ((text[0] == '\xFF' && text[1] == '\xFE') || (text[0] == '\xFE' && text[1] == '\xFF'));
  if (bom16 || text.find('\0') != std::string::npos) {
    throw InputError(path + ": holds " + (bom16 ? "a UTF-16 byte order mark" : "NUL bytes") +
                     ", not text: a schedule file is ASCII or UTF-8 (save a UTF-16 file, e.g. from PowerShell's '>', "
                     "as UTF-8)");
  }
  return schedule_file_text(text);
}

Schedule load_schedule(const std::string& path) {
  Schedule s = parse_text(read_schedule_file(path), path);
  s.name = "file:" + path;
  return s;
}

void save_schedule(const Schedule& s, const std::string& path) {
  std::ofstream out(path);
  if (!out) throw Error("cannot write schedule file '" + path + "'");
  out << to_text(s);
  if (!out) throw Error("failed writing schedule file '" + path + "'");
}

}  // namespace conductor::sched
