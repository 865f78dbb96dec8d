#pragma once
// The schedule IR: per rank, an ordered list of actions (kind, microbatch, chunk), and the placement of the
// p*v virtual stages on the p ranks. Generators produce it, the validator checks it, files store it (text form
// below), the simulator and the MPI runtime consume it (through the arbiter, arbiter.hpp).
//
// Stages, chunks, ranks. There are S = p*v virtual stages, numbered in model order (stage 0 holds the
// embedding, stage S-1 the loss). Rank r holds v chunks; chunk c of rank r is one virtual stage:
//   loop placement (1F1B, interleaved):   stage = c*p + r
//   V placement (zb-v, v = 2):            stage = r for c = 0, stage = 2p-1-r for c = 1
// so under V the first and the last stage both live on rank 0 and stages p-1, p share rank p-1.
//
// Memory. Units of M_F = the activations one microbatch leaves on one rank for all its layers; an F of one
// chunk allocates 1/v of it, B frees (1 - a)/v, W frees a/v, BW frees 1/v, with a = memory_after_b.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace conductor::sched {

// Values match trace::EventKind, so an op kind converts to the trace enum by a cast.
enum class OpKind : std::int8_t { F = 0, B = 1, W = 2, BW = 3 };

const char* to_string(OpKind kind);  // "F", "B", "W", "BW"

struct Action {
  OpKind kind = OpKind::F;
  int microbatch = 0;
  int chunk = 0;
  bool operator==(const Action&) const = default;
};

// Text form of one action: chunk, kind, microbatch: "0F3", "1B12", "0BW7".
std::string to_string(const Action& a);

enum class Placement : std::int8_t { Loop = 0, V = 1 };

const char* to_string(Placement placement);

struct Schedule {
  int p = 1;  // ranks (pipeline stages)
  int m = 1;  // microbatches per step
  int v = 1;  // chunks per rank
  Placement placement = Placement::Loop;
  std::string name;                        // generator kind or "file:PATH"
  std::vector<std::vector<Action>> ranks;  // ranks[r] = rank r's actions in hint order

  int num_stages() const { return p * v; }
  int stage_of(int rank, int chunk) const;  // virtual stage of (rank, chunk)
  int rank_of(int stage) const;             // rank holding a virtual stage
  int chunk_of(int stage) const;            // chunk index of a virtual stage on its rank
  std::size_t num_actions() const;
};

// What a cross-stage dependency carries.
enum class Payload : std::int8_t { Activation = 0, Gradient = 1 };

// One stage-to-stage transfer of one microbatch: the output of an op on from_stage that an op on to_stage
// needs. When from_rank == to_rank (V placement at the bottom of the V, or p = 1) no message is sent and no
// comm time is paid (local()).
struct Transfer {
  Payload payload = Payload::Activation;
  int microbatch = 0;
  int from_stage = 0, from_rank = 0, from_chunk = 0;
  int to_stage = 0, to_rank = 0, to_chunk = 0;
  bool local() const { return from_rank == to_rank; }
};

// The cross-stage input an action waits for: the activation of F(stage-1) for F, the gradient of the
// B/BW of stage+1 for B and BW; none for F on stage 0, B/BW on the last stage, and W (whose only dependency,
// its B, is on the same stage).
std::optional<Transfer> input_of(const Schedule& s, int rank, const Action& a);
// Where an action's result goes: F sends its activation to stage+1, B/BW send the input gradient to
// stage-1; none for F on the last stage, B/BW on stage 0, and W.
std::optional<Transfer> output_of(const Schedule& s, int rank, const Action& a);

// Memory change of an action in units of M_F (see above); a = memory_after_b.
double memory_delta(OpKind kind, int v, double memory_after_b);

// The largest schedule file read (text form or torch's CSV; read whole): p = 1024, m = 4096 in the text form is
// about 100 MB.
inline constexpr std::uintmax_t kMaxScheduleFileBytes = std::uintmax_t{1} << 30;

// Text form:
//   # comment
//   pipeline 4
//   microbatches 8
//   virtual 1
//   placement loop            (or v)
//   rank 0: 0F0 0F1 0F2 0F3 0B0 0W0 ...
// one "rank r:" line per rank (an action list may continue on following lines that do not start a new key).
std::string to_text(const Schedule& s);
// Parses the text form; throws InputError naming source:line and the offending token. Structure only: call
// validate() (validate.hpp) before running it.
Schedule parse_text(const std::string& text, const std::string& source = "<schedule>");
// The same, with `check` called on what was read before the ranks without a 'rank r:' line are refused: a file
// for another shape (import_schedule: the deck's) is then named as such, not as one missing a rank line.
Schedule parse_text(const std::string& text, const std::string& source,
                    const std::function<void(const Schedule&)>& check);
Schedule load_schedule(const std::string& path);  // parse_text of a file; InputError if unreadable
// A schedule file's whole text (read_text_input's checks, at most kMaxScheduleFileBytes), its line ends as '\n'
// (CR LF and a lone CR alike) and no UTF-8 byte order mark: what both schedule formats parse.
std::string read_schedule_file(const std::string& path);
void save_schedule(const Schedule& s, const std::string& path);

}  // namespace conductor::sched
